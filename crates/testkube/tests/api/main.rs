//! testkube's REST API as clients see it: CRUD, patch, watch, custom resources and their
//! validation, error shapes, Events, fault injection and the request counters.
//!
//! `cargo test -p testkube --test api [name filter]`

// The JSON literals of the CRD validation cases nest deeper than the default limit.
#![recursion_limit = "256"]

#[path = "../support/mod.rs"]
mod support;

mod crd;
mod crd_validation;
mod crud;
mod events;
mod faults;
mod http_errors;
mod misc;
mod patch;
mod watch;
