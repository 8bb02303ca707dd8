//! kubeflavor's pure core: every security decision of kubeflavor as plain functions over
//! plain data. No I/O, no async, no Kubernetes client: the binary gathers facts, calls
//! these functions and applies their results.

pub mod flavor;
pub mod labels;
pub mod names;
pub mod token;
