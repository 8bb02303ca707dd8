//! kubeflavor's pure core: every security decision of kubeflavor as plain functions over
//! plain data. No I/O, no async, no Kubernetes client: the binary gathers facts, calls
//! these functions and applies their results.

// Tokens, flavors, the CSR policy and node flavoring.
pub mod applied_record;
pub mod approvers;
pub mod cidr;
pub mod csr;
pub mod flavor;
pub mod index_freshness;
pub mod input_labels;
pub mod invisible;
pub mod labels;
pub mod names;
pub mod node_cutoff;
pub mod node_state;
pub mod placement;
pub mod policy;
pub mod revocation_list;
pub mod serving_csr;
pub mod serving_policy;
pub mod sole_approver_policy;
pub mod taint;
pub mod token;
pub mod token_limits;
pub mod token_meta;
pub mod token_record;
pub mod token_secret;
pub mod token_shape;
pub mod trail_policy;
pub mod ttl;
pub mod unverified_policy;

// The join-token API: what a request may ask, how many a caller may make, what a
// machine is handed.
pub mod cloud_init;
pub mod handshake_pool;
pub mod mint_rate;
pub mod mint_request;
pub mod ssh_key;

// Discovery, copy-certs, PKI and the kubelet CSR (core-crypto).
pub mod certkey;
pub mod copycerts;
mod der;
pub mod discovery;
pub mod jws;
pub mod keys;
pub mod kubeconfig;
pub mod kubelet_csr;
mod pem;
pub mod pin;
pub mod pki;
pub mod random;

// Entry points for fuzzing: with the `fuzzing` feature, which the fuzz crate enables, and
// in this crate's unit tests, which replay the corpora and regressions through them.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
