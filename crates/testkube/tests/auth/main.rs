//! Who a caller is and what it may do: authentication (bootstrap tokens, certificates,
//! anonymous, and the token authenticator's lag), RBAC, the Node authorizer, admission,
//! and the delegated reviews.
//!
//! `cargo test -p testkube --test auth [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod identities;
mod identities_admission;
mod reviews;
mod token_auth_lag;
