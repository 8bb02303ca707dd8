//! `[preflight]`: kubeadm's FileAvailable checks, before any network traffic, so a node
//! that has joined (or is joining) never spends a token use.

use super::{CaCheck, JoinError, JoinOptions, Paths, Report, files};

/// Refuses a node that has joined or is joining, and a kubelet configuration this join
/// would have to overwrite. Returns whether the configuration still needs writing (an
/// identical one is kept). A dangling symlink counts as present: whatever it points at is
/// not this join's to write.
pub(super) fn check(
    opts: &JoinOptions,
    paths: &Paths,
    config: &str,
    report: &mut dyn Report,
) -> Result<bool, JoinError> {
    if files::is_present(&paths.kubelet) {
        return Err(JoinError::AlreadyJoined(paths.kubelet.clone()));
    }
    if files::is_present(&paths.bootstrap) {
        return Err(JoinError::BootstrapPending(paths.bootstrap.clone()));
    }
    let write_config = match files::read_if_present(&paths.config).map_err(JoinError::KubeletDir)? {
        None => true,
        Some(existing) if existing == config.as_bytes() => false,
        Some(_) => return Err(JoinError::KubeletConfigExists(paths.config.clone())),
    };
    if let CaCheck::UnsafeSkip = opts.ca_check {
        report.warn(
            "WARNING: --discovery-token-unsafe-skip-ca-verification: the cluster CA is NOT verified. \
             Anyone who knows this token can impersonate the cluster to this node. \
             Use --discovery-token-ca-cert-hash instead.",
        );
    }
    Ok(write_config)
}
