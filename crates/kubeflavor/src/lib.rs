//! kubeflavor: the binary's library.

pub mod join;
