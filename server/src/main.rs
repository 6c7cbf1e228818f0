fn main() -> std::process::ExitCode {
    vigil_server::cli::main()
}
