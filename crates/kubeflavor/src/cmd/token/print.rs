//! Printing the join line `token create --print-join-command` asks for.

use std::io::Write;

use kubeflavor_core::token::BootstrapToken;

use crate::error::CliError;
use crate::minting::{JoinTarget, join_command_line};

/// Prints the join line: printing the token once is this command's job.
pub fn print_join_command(
    target: &JoinTarget,
    token: &BootstrapToken,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    out.write_all(join_command_line(target, token).as_bytes())?;
    Ok(())
}
