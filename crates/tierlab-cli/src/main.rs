fn main() -> std::process::ExitCode {
    // Die quietly on a closed pipe (`tierlab trace convert x - | head`), as
    // Unix tools do, instead of panicking in println!/eprintln!.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal at startup,
    // before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tierlab_cli::main_with_args(std::env::args_os())
}
