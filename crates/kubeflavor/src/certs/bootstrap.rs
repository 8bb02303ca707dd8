//! Reading the Secret as a bootstrap identity (`certs download --server --token
//! --discovery-token-ca-cert-hash`): the cluster is authenticated by `join`'s discovery first.

use std::io::Write;

use kubeflavor_core::token::BootstrapToken;

use crate::cmd::certs::{BootstrapArgs, SecretText};
use crate::error::CliError;

/// Progress lines of discovery on the command's output.
struct LineReport<'a> {
    out: &'a mut dyn Write,
}

impl crate::join::Report for LineReport<'_> {
    fn info(&mut self, line: &str) {
        let _ = writeln!(self.out, "{line}");
    }
    fn warn(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// `certs download --server --token --discovery-token-ca-cert-hash`: authenticate the
/// cluster exactly as `join` does (token-signed cluster-info, CA pin, CA-verified re-read),
/// then read the Secret as the bootstrap token. Bad input exits with join's codes.
pub async fn bootstrap_client(
    server: &str,
    args: &BootstrapArgs,
    out: &mut dyn Write,
) -> Result<kube::Client, CliError> {
    use crate::cmd::join::exit_code;
    use crate::exit::ExitCode;
    use crate::join::{self, CaCheck, JoinError, discovery};
    use kubeflavor_core::pin::CaPin;

    let endpoint = join::parse_endpoint(server).map_err(|m| CliError::bare(ExitCode::Usage, m))?;
    // Parsed here, not by clap: clap would echo the secret in its error.
    let token: BootstrapToken = args
        .token
        .as_ref()
        .map(SecretText::expose)
        .unwrap_or_default()
        .parse()
        .map_err(|e| {
            CliError::new(
                ExitCode::JoinMalformedToken,
                format_args!("--token is not a bootstrap token: {e}"),
                "use a token from 'kubeflavor token create --control-plane'",
            )
        })?;
    let pins = args
        .discovery_token_ca_cert_hash
        .iter()
        .map(|h| {
            h.parse::<CaPin>().map_err(|e| {
                CliError::new(
                    ExitCode::JoinMalformedPin,
                    format_args!("--discovery-token-ca-cert-hash {h:?} is not a CA pin: {e}"),
                    "sha256:<64 hex characters>, as 'kubeflavor token create --print-join-command' prints it",
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let config = discovery::DiscoveryConfig {
        endpoint,
        token: token.clone(),
        ca_check: CaCheck::Pinned(pins),
        timeout: std::time::Duration::from_secs(300),
        retry_interval: std::time::Duration::from_secs(5),
    };
    let cluster = discovery::discover(&config, &mut LineReport { out })
        .await
        .map_err(|e| {
            let e = JoinError::Discovery(e);
            CliError::bare(exit_code(&e), e.to_string())
        })?;
    Ok(super::download::bootstrap_client(
        &cluster.server,
        &cluster.ca_certs_der,
        &token,
    )?)
}
