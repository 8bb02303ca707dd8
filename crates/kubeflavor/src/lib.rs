//! kubeflavor, the binary's library: command logic callable from tests.

pub mod certs;
pub mod cmd;
