fn main() -> std::process::ExitCode {
    tierlab_cli::main_with_args(std::env::args_os())
}
