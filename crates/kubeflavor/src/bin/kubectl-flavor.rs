//! `kubectl flavor ...`: kubectl runs plugins by finding `kubectl-<name>` on the PATH. This
//! is the same program as `kubeflavor`; help and usage say `kubectl flavor` under this name.

fn main() -> std::process::ExitCode {
    kubeflavor::main()
}
