//! testkube: an in-memory Kubernetes API server on loopback for kubeflavor's tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), testkube::StartError> {
//! let cluster = testkube::TestCluster::start().await?;
//! let kubeconfig_yaml = cluster.admin_kubeconfig();
//! // kube::Config::from_custom_kubeconfig(Kubeconfig::from_yaml(&kubeconfig_yaml)?, &Default::default())
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! See the crate README for what it imitates faithfully and what it knowingly does not.

// `ApiError` (a whole metav1.Status) is the error of every handler and of the fixed policy
// interfaces; it is the normal answer of a test API server, not a rare path, so boxing it
// everywhere would only add noise.
#![allow(clippy::result_large_err)]

pub mod admission;
pub mod authn;
pub mod authz;
pub mod controllers;
pub mod counters;
pub mod crd_validation;
pub mod discovery;
pub mod errors;
pub mod faults;
pub mod gc;
pub mod handlers;
pub mod kcm;
pub mod openapi;
pub mod patch;
pub mod pki;
pub mod resources;
pub mod selectors;
pub mod server;
pub mod store;
pub mod types;
pub mod validation;

mod cluster;

pub use cluster::{DEFAULT_TOKEN_AUTH_LAG, StartError, TestCluster, TestClusterBuilder};
pub use controllers::Duties;
pub use counters::{CounterKey, CounterSnapshot};
pub use faults::Faults;
pub use types::IdentityKind;
