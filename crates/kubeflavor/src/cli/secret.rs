//! Secrets a command takes (the bootstrap token, the certificate key) from somewhere no
//! process list shows: a file, stdin (`-`), or an environment variable. A value on the
//! command line (`--token`, `--certificate-key`, kubeadm's flags) still works, and every
//! user of the machine can read it in /proc/<pid>/cmdline while the command runs.
//!
//! One source per secret: the flag and its `-file` twin conflict (clap says so, exit 2); the
//! environment variable is read only when neither is given, so a variable exported in a
//! shell profile never turns a command line into an error.

use std::io::Read;
use std::path::Path;

use kubeflavor_core::crypto::certkey::CertificateKey;

use crate::certs::{self, CertsError};
use crate::error::CliError;
use crate::exit::ExitCode;

/// A secret flag value as typed (`--certificate-key`, `--token`): zeroized on drop and never
/// shown by Debug (the parsed arguments are Debug). Validated where it is used, so a
/// malformed value gets its own exit code rather than clap's usage error (which would also
/// echo the value).
#[derive(Clone)]
pub struct SecretText(zeroize::Zeroizing<String>);

impl std::str::FromStr for SecretText {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SecretText(zeroize::Zeroizing::new(s.to_owned())))
    }
}

impl std::fmt::Debug for SecretText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretText(****)")
    }
}

impl SecretText {
    pub fn new(s: &str) -> Self {
        SecretText(zeroize::Zeroizing::new(s.to_owned()))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value as a certificate key.
    pub fn certificate_key(&self) -> Result<CertificateKey, CertsError> {
        certs::parse_certificate_key(&self.0)
    }
}

/// Environment variable that may carry the certificate key instead of the command line
/// (where every user of the machine can read it in the process list).
pub const KEY_ENV: &str = "KUBEFLAVOR_CERTIFICATE_KEY";

/// Environment variable that may carry the bootstrap token (`join`, `certs download
/// --server`).
pub const TOKEN_ENV: &str = "KUBEFLAVOR_JOIN_TOKEN";

/// What `-` as a file name means.
pub const STDIN: &str = "-";

/// A secret that could not be read from where it was said to be.
#[derive(Debug, thiserror::Error)]
pub enum SecretInputError {
    #[error("cannot read {flag} {path}: {source} (check the path and its permissions)")]
    File {
        flag: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{0} and {1} both read from stdin ('-'); only one can (put the other in a file, or in its environment variable)"
    )]
    StdinTwice(&'static str, &'static str),
}

/// A secret with its three ways in.
pub struct SecretFlags<'a> {
    /// The value given on the command line.
    pub value: Option<&'a SecretText>,
    /// The file given for it (`-` for stdin), and the flag's name for messages.
    pub file: Option<&'a Path>,
    pub file_flag: &'static str,
    /// The environment variable read when neither flag is given.
    pub env: &'static str,
}

impl SecretFlags<'_> {
    /// The secret, or `None` when none of the three gives one. A file's content is taken
    /// without surrounding whitespace (the newline an editor or `echo` adds).
    pub fn read(&self) -> Result<Option<SecretText>, SecretInputError> {
        if let Some(v) = self.value {
            return Ok(Some(v.clone()));
        }
        if let Some(path) = self.file {
            let mut text = zeroize::Zeroizing::new(String::new());
            let read = if path.as_os_str() == STDIN {
                std::io::stdin().read_to_string(&mut text)
            } else {
                std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text))
            };
            read.map_err(|source| SecretInputError::File {
                flag: self.file_flag,
                path: path.display().to_string(),
                source,
            })?;
            return Ok(Some(SecretText::new(text.trim())));
        }
        Ok(std::env::var(self.env)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| SecretText::new(zeroize::Zeroizing::new(v).trim())))
    }
}

/// Refuses two secrets read from stdin in one command (the second would read nothing).
pub fn one_stdin(files: &[(&'static str, Option<&Path>)]) -> Result<(), SecretInputError> {
    let from_stdin: Vec<&'static str> = files
        .iter()
        .filter(|(_, f)| f.is_some_and(|p| p.as_os_str() == STDIN))
        .map(|(flag, _)| *flag)
        .collect();
    match from_stdin.as_slice() {
        [first, second, ..] => Err(SecretInputError::StdinTwice(first, second)),
        _ => Ok(()),
    }
}

/// A secret file that cannot be read, or two secrets from stdin.
pub(crate) fn secret_input_error(e: SecretInputError) -> CliError {
    let code = match e {
        SecretInputError::File { .. } => ExitCode::Error,
        SecretInputError::StdinTwice(..) => ExitCode::Usage,
    };
    CliError::bare(code, e.to_string())
}

/// The certificate key from its flag, its file (`-`: stdin) or KUBEFLAVOR_CERTIFICATE_KEY.
pub(crate) fn read_key(
    value: Option<&SecretText>,
    file: Option<&std::path::Path>,
) -> Result<Option<CertificateKey>, CertsError> {
    SecretFlags {
        value,
        file,
        file_flag: "--certificate-key-file",
        env: KEY_ENV,
    }
    .read()
    .map_err(|e| CertsError::Other(e.to_string()))?
    .as_ref()
    .map(SecretText::certificate_key)
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags<'a>(value: Option<&'a SecretText>, file: Option<&'a Path>) -> SecretFlags<'a> {
        SecretFlags {
            value,
            file,
            file_flag: "--token-file",
            env: "KUBEFLAVOR_TEST_SECRET_THAT_IS_NEVER_SET",
        }
    }

    #[test]
    fn a_file_is_read_without_its_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abcdef.0123456789abcdef\n").unwrap();
        let got = flags(None, Some(&path)).read().unwrap().unwrap();
        assert_eq!(got.expose(), "abcdef.0123456789abcdef");
    }

    #[test]
    fn the_flag_wins_and_nothing_given_is_none() {
        let value = SecretText::new("from-the-flag");
        let missing = Path::new("/nonexistent/never-read");
        let got = flags(Some(&value), Some(missing)).read().unwrap().unwrap();
        assert_eq!(got.expose(), "from-the-flag");
        assert!(flags(None, None).read().unwrap().is_none());
    }

    #[test]
    fn an_unreadable_file_names_the_flag_and_the_path() {
        let err = flags(None, Some(Path::new("/nonexistent/token")))
            .read()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cannot read --token-file /nonexistent/token: "),
            "{err}"
        );
    }

    #[test]
    fn only_one_secret_may_come_from_stdin() {
        let dash = Path::new(STDIN);
        let file = Path::new("/etc/key");
        one_stdin(&[
            ("--token-file", Some(dash)),
            ("--certificate-key-file", Some(file)),
        ])
        .unwrap();
        let err = one_stdin(&[
            ("--token-file", Some(dash)),
            ("--certificate-key-file", Some(dash)),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("only one can"), "{err}");
    }
}
