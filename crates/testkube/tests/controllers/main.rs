//! The controllers testkube runs in place of kube-controller-manager: the bootstrap signer
//! and token cleaner, the CSR signer and approver, garbage collection, and discovery as
//! `kubeadm join` performs it on top of them.
//!
//! `cargo test -p testkube --test controllers [name filter]`

#[path = "../support/mod.rs"]
mod support;

mod csr_approver;
mod gc;
mod kcm;
mod policy_discovery;
