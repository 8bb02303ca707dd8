//! `kubeflavor certs`: the certificate hand-off between control-plane nodes, through the
//! library and the binary: round trips, bad input, who may read what, and the download a
//! joining control-plane node performs.
//!
//! `cargo test -p kubeflavor --test certs [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod helpers;

mod bad_input;
mod cli;
mod join;
mod roundtrip;
mod security;
