//! kubeflavor's pure core: every security decision of kubeflavor as plain functions over
//! plain data. No I/O, no async, no Kubernetes client: the binary gathers facts, calls
//! these functions and applies their results.
//!
//! Grouped by subject; a folder imports only from folders below it:
//! `names`, `invisible` and `crypto` at the bottom, then `join`, `csr`, `flavor`, `token`,
//! `approval`, `admission`, `node` and `mint`.

// Words every decision rests on: Kubernetes object names, characters that are not seen.
pub mod invisible;
pub mod names;

// Keys, certificates, PEM, the CA pin and the copy-certs codec (core-crypto).
pub mod crypto;

// kubeadm join's discovery: cluster-info's kubeconfig and its JWS signatures.
pub mod join;

// Kubelet CSRs: client and serving requests as Kubernetes validates them, and the
// kubelet's own request of `join --tls-bootstrap`.
pub mod csr;

// What a flavor means for a node: its rules, labels, taints, input labels, token limits.
pub mod flavor;

// Bootstrap tokens and kubeflavor's token Secrets.
pub mod token;

// Approving kubelet CSRs: the client and serving decisions, and who else approves.
pub mod approval;

// The admission policies `install` ships (rules the API server enforces).
pub mod admission;

// A node's state: its labels and taints, its applied record, revocation and cutoff.
pub mod node;

// The join-token API: what a request may ask, how many a caller may make, what a
// machine is handed.
pub mod mint;

// What kubeflavor observed about a node's network, kept apart from what the node claims.
pub mod network;

// The node administrators' web portal: sign-in, sessions, forms, downloads.
pub mod portal;

// Which pending TLS handshakes a server keeps (the authorization webhook, the join-token
// API).
pub mod handshake_pool;

// Entry points for fuzzing: with the `fuzzing` feature, which the fuzz crate enables, and
// in this crate's unit tests, which replay the corpora and regressions through them.
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
