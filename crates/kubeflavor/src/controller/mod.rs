//! `kubeflavor controller`: approves or denies kubelet client CSRs for kubeflavor tokens,
//! binds node names to tokens, and keeps each flavor's labels and taints on its Nodes.

pub mod http;
pub mod leader;
pub mod metrics;
