//! What `kubeflavor join` reads and writes as kubeadm does: the discovery decision over
//! `kube-public/cluster-info`, its JWS signatures and the kubeconfig model.

pub mod discovery;
pub mod jws;
pub mod kubeconfig;
