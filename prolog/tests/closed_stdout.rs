//! A reader that closes the pipe early (`gpu-affinity-health --json | head -c0`) gets a
//! short answer, never a panic: the programs drop a write to a closed stdout, and the
//! exit status stays the pass's own.

use std::process::{Command, Stdio};

#[test]
fn a_closed_stdout_is_not_a_panic() {
    for program in [
        env!("CARGO_BIN_EXE_gpu-affinity-health"),
        env!("CARGO_BIN_EXE_gpu-affinity-prolog"),
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        // The write end only: every write to it fails with EPIPE.
        drop(reader);
        let out = Command::new(program)
            .arg("--version")
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{program}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{program}: {stderr}");
    }
}
