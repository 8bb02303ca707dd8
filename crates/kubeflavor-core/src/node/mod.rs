//! A node's state under kubeflavor: the labels and taints it must carry, the record of
//! what kubeflavor put there, revocation, the authorization webhook's cutoff, and where
//! kubeflavor's own pods run.

pub mod applied_record;
pub mod cutoff;
pub mod index_freshness;
pub mod placement;
pub mod revocation_list;
pub mod state;
