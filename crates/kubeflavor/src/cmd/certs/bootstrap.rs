//! Reading the Secret as a bootstrap identity (`certs download --server --token
//! --discovery-token-ca-cert-hash`): the cluster is authenticated by `join`'s discovery first.

use std::io::Write;

use super::BootstrapArgs;
use crate::certs::download;
use crate::cli::discovery_flags::{parse_pins, parse_token};
use crate::cli::secret::TOKEN_ENV;
use crate::cmd::join::{WriterReport, exit_code};
use crate::error::CliError;
use crate::exit::ExitCode;
use crate::join::{self, CaCheck, JoinError, discovery};

/// `certs download --server --token --discovery-token-ca-cert-hash`: authenticate the
/// cluster exactly as `join` does (token-signed cluster-info, CA pin, CA-verified re-read),
/// then read the Secret as the bootstrap token. Bad input exits with join's codes.
pub async fn bootstrap_client(
    server: &str,
    args: &BootstrapArgs,
    out: &mut dyn Write,
) -> Result<kube::Client, CliError> {
    let endpoint = join::parse_endpoint(server).map_err(|m| CliError::bare(ExitCode::Usage, m))?;
    let Some(token) = args.token()? else {
        return Err(CliError::new(
            ExitCode::Usage,
            "--server needs a bootstrap token",
            format_args!(
                "pass --token-file with a file holding a token from 'kubeflavor token create --control-plane', or set {TOKEN_ENV}"
            ),
        ));
    };
    let token = parse_token(
        token.expose(),
        "use a token from 'kubeflavor token create --control-plane'",
    )?;
    let pins = parse_pins(
        &args.discovery_token_ca_cert_hash,
        "sha256:<64 hex characters>, as 'kubeflavor token create --print-join-command' prints it",
    )?;
    let config = discovery::DiscoveryConfig {
        endpoint,
        token: token.clone(),
        ca_check: CaCheck::Pinned(pins),
        timeout: args.timeout,
        retry_interval: std::time::Duration::from_secs(5),
    };
    let cluster = discovery::discover(&config, &mut WriterReport { out })
        .await
        .map_err(|e| {
            let e = JoinError::Discovery(e);
            CliError::bare(exit_code(&e), e.to_string())
        })?;
    Ok(download::bootstrap_client(
        &cluster.server,
        &cluster.ca_certs_der,
        &token,
    )?)
}
