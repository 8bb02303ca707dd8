//! Approving kubelet CSRs: the client decision (`client::decide`), the serving decision
//! (`serving::decide_serving`) and who else approves client CSRs, read from RBAC.

pub mod approvers;
pub mod client;
pub mod serving;
