//! Keys, certificates and their encodings: PEM and DER, the CA pin, kubeadm's shared CA
//! set and the copy-certs codec with its certificate key, and the one seam for randomness.

pub mod certkey;
pub mod copycerts;
pub(crate) mod der;
pub mod keys;
pub(crate) mod pem;
pub mod pin;
pub mod pki;
pub mod random;
