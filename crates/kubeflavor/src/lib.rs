//! kubeflavor: flavored bootstrap tokens and the controller that enforces them.

pub mod controller;
