//! The other commands end to end: `install`, `flavor`, `token`, the CRDs' validation as
//! the API server applies it, and the binary's exit codes and output. (`install
//! --no-token-node-read` has a binary of its own, tests/token_node_read.rs: it changes what
//! every test's install applies.)
//!
//! `cargo test -p kubeflavor --test cli [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod bin;
mod crd_validation;
mod flavor;
mod install;
mod roster;
mod token;
