//! `kubeflavor controller`: approves or denies kubelet client CSRs for kubeflavor tokens,
//! binds node names to tokens, and keeps each flavor's labels and taints on its Nodes.
//!
//! Shape (controller-rs): a [`Context`] shared by the reconcilers, a thiserror [`Error`]
//! with `metric_label()`, metrics in their own module. Each reconciler reads as stages
//! (stackable): gather facts (reads) -> decide (kubeflavor-core, pure) -> apply (writes).
//! No policy lives here: every approve/deny/flavor decision is a core function.
//!
//! Every write is re-derivable from API state, so a controller stopped between any two
//! writes is finished by the next run (P6, nothing lost): the token's `bound-nodes` annotation, the
//! FlavorBinding and the CSR condition are each checked again before the next step.

pub mod approvers;
pub mod cache;
pub mod census;
mod context;
pub mod csr;
mod error;
pub mod fleet;
pub mod leader;
pub mod metrics;
pub mod network;
pub mod node;
mod options;
mod process;
pub mod queue;
pub mod revoked;
mod runtime;
mod term;
mod turns;
pub mod unverified;

pub use self::context::{Context, Step, StepHook};
pub use self::error::Error;
pub use self::options::{
    FIELD_MANAGER, KUBELET_CLIENT_SIGNER, LEASE_NAME, Options, REPORTING_CONTROLLER,
    TOKEN_NAMESPACE, patch_params,
};
pub use self::process::run;
pub use self::runtime::Runtime;
use self::runtime::{Stop, with_grace};
pub use self::turns::Turns;
