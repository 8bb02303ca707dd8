//! testkube: an in-memory Kubernetes API server on loopback for kubeflavor's tests.

pub mod admission;
pub mod authn;
pub mod authz;
pub mod kcm;
pub mod types;
