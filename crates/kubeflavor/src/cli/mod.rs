//! What every command line shares: the global flags and the value parsers. Values are
//! parsed once, into kubeflavor-core's types, so the commands never see an unchecked
//! string. The command tree itself is in [`crate::cmd`], each command's flags next to it.

pub mod discovery_flags;
pub mod secret;
mod values;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

pub use values::{FlavorLabel, KeyValue, MaxNodes, TrustLevelArg};

use crate::connect::ClusterArgs;

#[derive(Debug, Args, Clone, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file to use (only this file, as with kubectl).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current-context.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// More log output on stderr (-v info, -vv debug, -vvv trace). Secrets are never logged.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// How logs on stderr look: `text` for people, `json` for log collectors (one JSON
    /// object per line: timestamp, level, target, message and fields). Text is coloured
    /// only when stderr is a terminal and NO_COLOR is unset or empty (https://no-color.org);
    /// JSON never is. RUST_LOG, if set, chooses what is logged, as -v does otherwise.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
}

/// The format of the log lines on stderr (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event; coloured only on a terminal without NO_COLOR.
    #[default]
    Text,
    /// One JSON object per line, never coloured.
    Json,
}

impl GlobalArgs {
    /// Where to find the cluster, as `--kubeconfig` and `--context` say.
    pub fn cluster(&self) -> ClusterArgs {
        ClusterArgs {
            kubeconfig: self.kubeconfig.clone(),
            context: self.context.clone(),
        }
    }
}
