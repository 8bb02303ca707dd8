//! kubeflavor's cluster floor: the reads and writes of every Kubernetes object kubeflavor
//! owns or edits, one module per kind, with the conversions to core's facts next to them;
//! and what kubeflavor's servers stand on to be operated (`ops`).
//!
//! It stands on kubeflavor-core only. It returns kube-rs errors or its own; it knows no
//! command line, exit code or HTTP status of kubeflavor's own servers.

pub mod bindings;
pub mod cache_lag;
pub mod crd;
pub mod csrs;
pub mod flavors;
pub mod leases;
pub mod node_reports;
pub mod nodes;
pub mod ops;
pub mod read;
pub mod revocation_list;
pub mod status;
pub mod token_secrets;
pub mod unverified_policy;
pub mod whoami;

// Fixtures for tests, here and in the crates above (the `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub mod testing;
