fn main() -> std::process::ExitCode {
    kubeflavor::main()
}
