//! The core's formats: the kubeadm-certs Secret and its encryption, cluster-info discovery,
//! kubeconfigs, the shared PKI, and the replay of the fuzz corpora and regressions.
//!
//! `cargo test -p kubeflavor-core --test codecs [name filter]`

mod copycerts_compat;
mod copycerts_secret;
mod copycerts_usable;
mod discovery;
mod fixtures;
mod kubeconfig;
mod pki;
