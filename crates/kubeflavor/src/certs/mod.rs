//! `kubeflavor certs`: kubeadm-compatible hand-off of control-plane CA material (P5, P6).

pub mod pki_files;
