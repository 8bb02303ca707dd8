//! `[kubelet-start]`: the files the kubelet starts with: bootstrap-kubelet.conf (with the
//! token), the cluster CA it trusts for client authentication, and its configuration.

use std::path::Path;

use kubeflavor_core::join::kubeconfig::Kubeconfig;
use kubeflavor_core::token::BootstrapToken;
use zeroize::Zeroizing;

use super::{DiscoveredCluster, JoinError, Paths, Report, Written, files};

/// Writes bootstrap-kubelet.conf (mode 0600) and returns its text for `[tls-bootstrap]`.
pub(super) fn write_bootstrap_kubeconfig(
    cluster: &DiscoveredCluster,
    token: &BootstrapToken,
    paths: &Paths,
    report: &mut dyn Report,
    written: &mut Written,
) -> Result<Zeroizing<String>, JoinError> {
    let text = bootstrap_kubeconfig(cluster, token)?;
    report.info(&format!(
        "[kubelet-start] Writing the bootstrap kubeconfig to {:?}",
        paths.bootstrap.display()
    ));
    files::write_secret_file(&paths.bootstrap, text.as_bytes()).map_err(JoinError::KubeletDir)?;
    written.file(&paths.bootstrap);
    Ok(text)
}

/// The cluster CA for the kubelet's client authentication, unless it is there already:
/// `--control-plane` just downloaded it with the rest of the PKI (the CA set the cluster's
/// admin uploaded), or else it was there before this join, and then it must be the CA this
/// join authenticated, and nothing more, since the kubelet will trust it.
pub(super) fn write_cluster_ca(
    cluster: &DiscoveredCluster,
    ca_path: &Path,
    downloaded: bool,
    report: &mut dyn Report,
    written: &mut Written,
) -> Result<(), JoinError> {
    if files::is_present(ca_path) {
        return match downloaded || holds_only_cluster_ca(cluster, ca_path)? {
            true => Ok(()),
            false => Err(JoinError::ForeignCaFile(ca_path.to_path_buf())),
        };
    }
    report.info(&format!(
        "[kubelet-start] Writing the cluster CA to {:?}",
        ca_path.display()
    ));
    let pki_dir = ca_path.parent().unwrap_or(Path::new("."));
    if !files::is_present(pki_dir) {
        std::fs::create_dir(pki_dir)
            .map_err(|e| JoinError::KubeletDir(files::WriteError::at(pki_dir, e)))?;
        written.dirs.push(pki_dir.to_path_buf());
    }
    files::write_file(ca_path, &cluster.ca_pem, files::PUBLIC_FILE_MODE)
        .map_err(JoinError::KubeletDir)?;
    written.file(ca_path);
    Ok(())
}

/// The existing CA file holds certificates, all of them CAs discovery authenticated.
fn holds_only_cluster_ca(cluster: &DiscoveredCluster, ca_path: &Path) -> Result<bool, JoinError> {
    let existing = files::read_if_present(ca_path)
        .map_err(JoinError::KubeletDir)?
        .unwrap_or_default();
    Ok(
        kubeflavor_core::crypto::keys::parse_certificates_pem(&existing).is_ok_and(|certs| {
            !certs.is_empty() && certs.iter().all(|c| cluster.ca_certs_der.contains(c))
        }),
    )
}

/// Writes the KubeletConfiguration (mode 0644: no secret in it).
pub(super) fn write_kubelet_config(
    path: &Path,
    config: &str,
    report: &mut dyn Report,
    written: &mut Written,
) -> Result<(), JoinError> {
    report.info(&format!(
        "[kubelet-start] Writing the kubelet configuration to {:?}",
        path.display()
    ));
    files::write_file(path, config.as_bytes(), files::PUBLIC_FILE_MODE)
        .map_err(JoinError::KubeletDir)?;
    written.file(path);
    Ok(())
}

/// bootstrap-kubelet.conf's text, with kubeadm's names.
pub(super) fn bootstrap_kubeconfig(
    cluster: &DiscoveredCluster,
    token: &BootstrapToken,
) -> Result<zeroize::Zeroizing<String>, JoinError> {
    Kubeconfig::bootstrap_kubelet(&cluster.server, &cluster.ca_pem, &token.expose())
        .to_yaml()
        .map_err(|e| JoinError::Kubeconfig(e.to_string()))
}
