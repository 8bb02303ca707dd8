//! testkube: an in-memory Kubernetes API server on loopback for kubeflavor's tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use testkube::{Identity, TestCluster};
//!
//! let cluster = TestCluster::start().await?;
//! let admin: kube::Client = cluster.client().await?;
//! let anonymous = cluster.client_as(Identity::Anonymous).await?;
//! // Or hand a kubeconfig to the program under test:
//! let kubeconfig_yaml = cluster.admin_kubeconfig();
//! cluster.faults().fail_next(1, "create", "secrets", 500);
//! let requests = cluster.counters().snapshot().total();
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! The public face: [`TestCluster`] (and its [`TestClusterBuilder`]) to start a server;
//! [`Identity`] and [`TestCluster::client_as`] for ready kube-rs clients (or
//! [`client_from_kubeconfig`] for any kubeconfig); [`Faults`] to inject errors, delays and
//! cut watches; [`Counters`] of requests by [`IdentityKind`], verb and resource.
//!
//! See the crate README for what it imitates faithfully and what it knowingly does not.

// `ApiError` (a whole metav1.Status) is the error of every handler and of the fixed policy
// interfaces; it is the normal answer of a test API server, not a rare path, so boxing it
// everywhere would only add noise.
#![allow(clippy::result_large_err)]
// The public face is small; every item of it says what it is for.
#![warn(missing_docs)]

// Everything below is the server's inside; tests use the face re-exported at the end.
pub(crate) mod admission;
pub(crate) mod authn;
pub(crate) mod authz;
pub(crate) mod controllers;
pub(crate) mod counters;
pub(crate) mod crd_validation;
pub(crate) mod discovery;
pub(crate) mod errors;
pub(crate) mod faults;
pub(crate) mod gc;
pub(crate) mod handlers;
pub(crate) mod kcm;
pub(crate) mod openapi;
pub(crate) mod patch;
pub(crate) mod pki;
pub(crate) mod resources;
pub(crate) mod selectors;
pub(crate) mod server;
pub(crate) mod shared;
pub(crate) mod store;
pub(crate) mod types;
pub(crate) mod validation;

mod client;
mod cluster;

pub use admission::validating_policy_verdict;
pub use authz::webhook::{AuthorizationWebhook, FailurePolicy};
pub use client::{ClientError, Identity, client_from_kubeconfig};
pub use cluster::{DEFAULT_TOKEN_AUTH_LAG, StartError, TestCluster, TestClusterBuilder};
pub use counters::{CounterKey, CounterSnapshot, Counters};
pub use faults::Faults;
pub use pki::PkiError;
pub use server::ServeError;
pub use types::IdentityKind;
