fn main() -> std::process::ExitCode {
    vigil_lab::cli::main()
}
