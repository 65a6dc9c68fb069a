//! Running the `tierlab` binary from a test and checking how it refused.

#![allow(dead_code)] // each test file uses its own share

use std::process::{Command, Output};

pub fn tierlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tierlab"))
        .args(args)
        .output()
        .unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Its stdout, after checking it exited 0.
pub fn stdout(o: Output) -> String {
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// Exit 1 (2 for clap's refusals of a flag value) and every `needle` in
/// stderr.
pub fn fails_with(o: Output, needles: &[&str]) {
    let err = stderr(&o);
    assert!(
        matches!(o.status.code(), Some(1 | 2)),
        "expected a refusal, got {:?}: {err}",
        o.status
    );
    for n in needles {
        assert!(err.contains(n), "{n:?} not in: {err}");
    }
}
