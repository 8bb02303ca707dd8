//! The admission policies `install` ships: rules the API server enforces on requests that
//! RBAC cannot tell apart (ValidatingAdmissionPolicy, MutatingAdmissionPolicy).

pub mod kubelet_topology;
pub mod node_report;
pub mod sole_approver;
pub mod token_shape;
pub mod trail;
pub mod unverified;
