//! The controller, run in-process against a cluster: the join flow from CSR to flavored
//! Node, the CSR policy as the API sees it, attacks on it, API faults, leader election, and
//! the join-token API that mints tokens for portals, who else approves kubelet CSRs, and the
//! series the alerts and the dashboard read.
//!
//! `cargo test -p kubeflavor --test controller [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod harness;

mod administrators;
mod approvers;
mod attacks;
mod authz;
mod authz_flood;
mod faults;
mod flow;
mod input_labels;
mod leader;
mod monitoring;
mod network;
mod policy;
mod portal;
mod promql;
mod release;
mod revoke;
mod serve;
mod serve_shape;
mod serving;
mod token_limits;
mod trail_policy;
mod unverified;
