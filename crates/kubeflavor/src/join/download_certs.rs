//! `[download-certs]` of `join --control-plane` (kubeadm's phase of the same name): after
//! discovery authenticated the cluster, read `kube-system/kubeadm-certs` as the bootstrap
//! token and write the control-plane CA material, all files or none. Progress goes to the
//! report; the key never does.

use jiff::Timestamp;
use kubeflavor_core::token::BootstrapToken;

use super::{DiscoveredCluster, JoinError, Report, Written};
use crate::certs::download::{self, DownloadOptions, report_lines};
use crate::certs::objects::{NAMESPACE, SECRET_NAME};

/// Downloads into `opts.pki_dir`; what it created is this run's to remove if a later phase
/// fails.
pub(super) async fn phase(
    cluster: &DiscoveredCluster,
    token: &BootstrapToken,
    opts: &DownloadOptions,
    report: &mut dyn Report,
    written: &mut Written,
) -> Result<(), JoinError> {
    report.info(&format!(
        "[download-certs] Downloading the certificates in Secret {SECRET_NAME:?} in the {NAMESPACE:?} Namespace"
    ));
    let client = download::bootstrap_client(&cluster.server, &cluster.ca_certs_der, token)?;
    let downloaded = download::download(&client, opts, Timestamp::now()).await?;
    written.add_download(&opts.pki_dir, &downloaded.written);
    if let Some(never) = downloaded.never_expires {
        report.warn(&format!("[download-certs] {}", never.warning()));
    }
    for line in report_lines("[download-certs]", &opts.pki_dir, &downloaded.written) {
        report.info(&line);
    }
    Ok(())
}
