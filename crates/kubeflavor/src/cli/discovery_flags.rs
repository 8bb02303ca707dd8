//! The discovery flags `join` and `certs download --server` share: the bootstrap token,
//! the CA pins and the discovery timeout. Each bad value has its own exit code, and the
//! token is parsed here rather than by clap, which would echo it in its error message.

use std::time::Duration;

use kubeflavor_core::crypto::pin::CaPin;
use kubeflavor_core::token::BootstrapToken;

use crate::error::CliError;
use crate::exit::ExitCode;

/// A positive duration such as `30s`, `5m` or `1m30s`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 30s, 5m, 1m30s"))?;
    if d.is_negative() || d.is_zero() {
        return Err(format!("{s:?} must be a positive duration, e.g. 5m"));
    }
    Duration::try_from(d).map_err(|e| format!("{s:?}: {e}"))
}

/// `--token`, parsed here rather than by clap: clap would echo the bad value, secret
/// included, in its error message. `fix` tells the user where a good token comes from.
pub fn parse_token(text: &str, fix: &str) -> Result<BootstrapToken, CliError> {
    text.parse().map_err(|e| {
        CliError::new(
            ExitCode::JoinMalformedToken,
            format_args!("--token is not a bootstrap token: {e}"),
            fix,
        )
    })
}

/// Every `--discovery-token-ca-cert-hash`; the first bad one is the error.
pub fn parse_pins(hashes: &[String], fix: &str) -> Result<Vec<CaPin>, CliError> {
    hashes
        .iter()
        .map(|h| {
            h.parse::<CaPin>().map_err(|e| {
                CliError::new(
                    ExitCode::JoinMalformedPin,
                    format_args!("--discovery-token-ca-cert-hash {h:?} is not a CA pin: {e}"),
                    fix,
                )
            })
        })
        .collect()
}
