//! Kubelet CSRs as Kubernetes validates them: client requests, serving requests, and the
//! kubelet's own client request for `join --tls-bootstrap`.

pub mod client;
pub mod kubelet;
pub mod serving;
