//! The one error type of the command layer. Every failure a user can see is a `CliError`:
//! an exit code and a single line that says what went wrong and, in parentheses, what to do.

use std::fmt;

use crate::exit::ExitCode;

/// A failure to report to the user: `error: <message>` on stderr, then exit with `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    pub code: ExitCode,
    pub message: String,
}

impl CliError {
    /// `what` went wrong; `fix` says what to do about it.
    pub fn new(code: ExitCode, what: impl fmt::Display, fix: impl fmt::Display) -> Self {
        CliError {
            code,
            message: format!("{what} ({fix})"),
        }
    }

    /// A message that already carries its own advice (or needs none).
    pub fn bare(code: ExitCode, message: impl Into<String>) -> Self {
        CliError {
            code,
            message: message.into(),
        }
    }

    pub fn failed(what: impl fmt::Display, fix: impl fmt::Display) -> Self {
        Self::new(ExitCode::Error, what, fix)
    }

    pub fn not_found(what: impl fmt::Display, fix: impl fmt::Display) -> Self {
        Self::new(ExitCode::NotFound, what, fix)
    }

    pub fn refused(what: impl fmt::Display, fix: impl fmt::Display) -> Self {
        Self::new(ExitCode::Refused, what, fix)
    }

    /// Writing the command's output failed (a closed pipe, a full disk).
    pub fn output(err: std::io::Error) -> Self {
        Self::bare(ExitCode::Error, format!("cannot write the output: {err}"))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl From<std::io::Error> for CliError {
    fn from(err: std::io::Error) -> Self {
        CliError::output(err)
    }
}

pub type Result<T, E = CliError> = std::result::Result<T, E>;
