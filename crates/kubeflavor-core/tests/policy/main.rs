//! The core's decisions: the CSR policy (decision table and properties), node flavoring
//! and release (the applied record), and the statistics of minted tokens.
//!
//! `cargo test -p kubeflavor-core --test policy [name filter]`

mod support;

mod applied_record;
mod decision_table;
mod join_csr;
mod node_state;
mod properties;
mod token_statistics;
