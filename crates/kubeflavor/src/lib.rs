//! kubeflavor, the binary's library: the command-line interface, typed cluster access and
//! the commands. `main.rs` (and the `kubectl-flavor` plugin binary) only call [`main`];
//! tests call [`run`] in-process with their own output buffer.

pub mod authz;
pub mod certs;
pub mod cli;
pub mod cmd;
pub mod connect;
pub mod controller;
pub mod dropped_connections;
pub mod error;
pub mod exit;
pub mod join;
pub mod minting;
pub mod outbound;
pub mod output;
pub mod report;
pub mod revocation;
pub mod serve;

use std::ffi::OsString;
use std::io::Write;

use clap::{CommandFactory, FromArgMatches};

use crate::cli::LogFormat;
use crate::cmd::Cli;
pub use crate::error::CliError;
pub use crate::exit::ExitCode;

/// What the command line asks for: run a command, or print help/version text.
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Cli>),
    Print(String),
}

/// Parse a command line (the first item is the program name). When the program is
/// `kubectl-flavor`, help and usage say `kubectl flavor`.
pub fn parse<I, T>(args: I) -> Result<Parsed, CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let invoked_as = args.first().and_then(|a| {
        std::path::Path::new(a)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
    });
    let mut command = Cli::command();
    if invoked_as.as_deref() == Some("kubectl-flavor") {
        command = command.bin_name("kubectl flavor");
    }
    let matches = match command.try_get_matches_from(args) {
        Ok(m) => m,
        Err(err) => return clap_outcome(err),
    };
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => Ok(Parsed::Run(Box::new(cli))),
        Err(err) => clap_outcome(err),
    }
}

/// Help and version are output, not errors. Any other clap error becomes one line: a
/// value our parsers refused (a label key a kubelet could write, `--max-nodes 0`) is a
/// refusal (exit 4) whose message already says what to do; anything else is a usage
/// error (exit 2) pointing at --help.
fn clap_outcome(err: clap::Error) -> Result<Parsed, CliError> {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            Ok(Parsed::Print(err.render().to_string()))
        }
        kind => {
            // clap's first paragraph is the message (a list of missing arguments spans
            // several lines); the rest is usage text that --help shows anyway.
            let rendered = err.render().to_string();
            let paragraph: Vec<&str> = rendered
                .lines()
                .skip_while(|l| l.trim().is_empty())
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let line = paragraph
                .join(" ")
                .trim_start_matches("error: ")
                .to_string();
            if kind == ErrorKind::ValueValidation {
                Err(CliError::bare(ExitCode::Refused, line))
            } else {
                Err(CliError::new(ExitCode::Usage, line, "see --help"))
            }
        }
    }
}

/// Parse and run one command line, writing the command's output to `out`.
pub async fn run<I, T>(args: I, out: &mut dyn Write) -> Result<(), CliError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    match parse(args)? {
        Parsed::Print(text) => {
            out.write_all(text.as_bytes())?;
            Ok(())
        }
        // On the heap: the state of every command's future together is larger than the
        // stack of a test thread (or of a caller's task) should have to hold.
        Parsed::Run(cli) => Box::pin(cmd::execute(*cli, out)).await,
    }
}

/// The process entry point of both binaries: parse, set up logging, run, and turn the
/// outcome into one `error: ...` line on stderr and an exit code.
pub fn main() -> std::process::ExitCode {
    connect::install_crypto_provider();
    let result = match parse(std::env::args_os()) {
        Ok(Parsed::Print(text)) => {
            print!("{text}");
            Ok(())
        }
        Ok(Parsed::Run(cli)) => {
            init_tracing(cli.global.verbose, cli.global.log_format);
            match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => {
                    let mut stdout = std::io::stdout().lock();
                    runtime.block_on(cmd::execute(*cli, &mut stdout))
                }
                Err(err) => Err(CliError::failed(
                    format!("cannot start the async runtime: {err}"),
                    "check the system's limits",
                )),
            }
        }
        Err(err) => Err(err),
    };
    match result {
        Ok(()) => ExitCode::Ok.into(),
        Err(err) => {
            eprintln!("error: {err}");
            err.code.into()
        }
    }
}

/// Logs go to stderr so that stdout stays the command's output. `RUST_LOG` overrides -v.
/// `--log-format json` writes one JSON object per line; text is coloured only where
/// [`log_color`] says so.
fn init_tracing(verbose: u8, format: LogFormat) {
    use std::io::IsTerminal;
    // kube-rs logs a failed connection at ERROR before returning the error that kubeflavor
    // reports in its own words; without -v that would be a second, noisier line.
    let level = match verbose {
        0 => "warn,kube_client=off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(log_color(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .try_init(),
        // Escape codes inside JSON strings would only corrupt what collectors index.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_ansi(false)
            .try_init(),
    };
}

/// Whether text logs carry ANSI colour codes: only when stderr is a terminal (a file, a
/// pipe or a container runtime's log capture gets plain text) and the `NO_COLOR`
/// environment variable is unset or empty (<https://no-color.org>: any non-empty value
/// turns colour off).
pub fn log_color(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(args: &[&str]) -> CliError {
        match parse(args.iter().copied()) {
            Err(e) => e,
            Ok(p) => panic!("{args:?} parsed: {p:?}"),
        }
    }

    #[test]
    fn missing_arguments_are_named_on_one_line() {
        let e = parse_err(&["kubeflavor", "token", "create"]);
        assert_eq!(e.code, ExitCode::Usage);
        assert!(e.message.contains("--flavor <NAME>"), "{e}");
        assert!(!e.message.contains('\n'), "{e:?}");
    }

    #[test]
    fn refused_values_exit_4_with_the_parser_message() {
        let e = parse_err(&[
            "kubeflavor",
            "flavor",
            "create",
            "x",
            "--trust-level",
            "101",
        ]);
        assert_eq!(e.code, ExitCode::Refused);
        assert!(e.message.contains("0 to 100"), "{e}");
        assert!(!e.message.contains('\n'), "{e:?}");
    }

    #[test]
    fn help_and_version_are_output_not_errors() {
        assert!(
            matches!(parse(["kubeflavor", "--version"]), Ok(Parsed::Print(v)) if v.contains(env!("CARGO_PKG_VERSION")))
        );
        assert!(
            matches!(parse(["kubeflavor", "token", "--help"]), Ok(Parsed::Print(h)) if h.contains("generate"))
        );
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(log_color(true, None));
        // no-color.org: an empty NO_COLOR does not count as set.
        assert!(log_color(true, Some(OsStr::new(""))));
        assert!(!log_color(true, Some(OsStr::new("1"))));
        assert!(
            !log_color(true, Some(OsStr::new("0"))),
            "any non-empty value"
        );
        assert!(
            !log_color(false, None),
            "a file or a pipe gets no escape codes"
        );
        assert!(!log_color(false, Some(OsStr::new(""))));
        assert!(!log_color(false, Some(OsStr::new("1"))));
    }

    #[test]
    fn log_format_defaults_to_text_and_accepts_json() {
        let format = |args: &[&str]| match parse(args.iter().copied()) {
            Ok(Parsed::Run(cli)) => cli.global.log_format,
            other => panic!("{args:?}: {other:?}"),
        };
        assert_eq!(
            format(&["kubeflavor", "token", "generate"]),
            LogFormat::Text
        );
        assert_eq!(
            format(&["kubeflavor", "--log-format", "json", "token", "generate"]),
            LogFormat::Json
        );
        // A global flag: accepted after the subcommand too.
        assert_eq!(
            format(&["kubeflavor", "token", "generate", "--log-format=text"]),
            LogFormat::Text
        );
    }

    #[test]
    fn a_bad_log_format_is_a_usage_error() {
        let e = parse_err(&["kubeflavor", "--log-format", "xml", "token", "generate"]);
        assert_eq!(e.code, ExitCode::Usage);
        assert!(e.message.contains("xml"), "{e}");
        assert!(e.message.contains("--log-format"), "{e}");
        assert!(!e.message.contains('\n'), "{e:?}");
    }

    #[test]
    fn plugin_name_changes_the_usage_line() {
        match parse(["/usr/local/bin/kubectl-flavor", "--help"]) {
            Ok(Parsed::Print(help)) => assert!(help.contains("Usage: kubectl flavor"), "{help}"),
            other => panic!("{other:?}"),
        }
    }
}
