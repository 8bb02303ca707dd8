//! kubeflavor: flavored bootstrap tokens and the controller that enforces them.

pub mod controller;
pub mod crd;
