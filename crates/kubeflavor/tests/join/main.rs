//! `kubeflavor join`: discovery, TLS bootstrap and the files left behind, end to end,
//! with bad input, a fake API server for answers no real cluster gives, and API faults.
//!
//! `cargo test -p kubeflavor --test join [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod fake_api;

mod bad_input;
mod e2e;
mod faults;
