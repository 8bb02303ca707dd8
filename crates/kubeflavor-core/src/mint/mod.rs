//! The join-token API's decisions: which flavor a node administrator gets (the roster),
//! what a mint request may ask, how many a caller may make, and what a machine is handed
//! (cloud-init, SSH keys).

pub mod cloud_init;
pub mod rate;
pub mod request;
pub mod roster;
pub mod seed_image;
pub mod ssh_key;
