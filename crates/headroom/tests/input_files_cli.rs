//! File inputs through the binary (issue 13): a FIFO is refused without
//! waiting for a writer, a file over the limit is refused without being
//! read, each with exit 1 and one message naming the flag, the file and
//! the limit.

mod common;

use std::process::{Command, Output};

/// Runs the binary under `timeout` so a hang fails the test instead of stalling it.
fn headroom(args: &[&str]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("60").arg(env!("CARGO_BIN_EXE_headroom")).args(args);
    common::hermetic(&mut cmd).output().unwrap()
}

fn fails_naming(args: &[&str], needles: &[&str]) {
    let out = headroom(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected `{n}` in {err}");
    }
}

#[test]
fn file_inputs_that_are_fifos_are_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("prompt.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let f = fifo.to_str().unwrap();
    let out = dir.path().join("out.safetensors");
    let out = out.to_str().unwrap();
    let model = ["--backend", "cpu", "--synthetic", "tiny-d64", "--out", out];
    for (flag, cmd) in [
        ("--prompt-file", "generate"),
        ("--prompts", "generate"),
        ("--ids", "logits"),
    ] {
        let mut args = vec![cmd];
        // --out belongs to logits only.
        let n = if cmd == "logits" { 6 } else { 4 };
        args.extend_from_slice(&model[..n]);
        args.extend_from_slice(&[flag, f]);
        fails_naming(&args, &[flag, "prompt.fifo", "not a regular file"]);
    }
    fails_naming(
        &["bench", "validate", f],
        &["bench validate", "prompt.fifo", "not a regular file"],
    );
}

#[test]
fn file_inputs_over_their_limit_are_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.txt");
    // Sparse: 64 MiB + 1 byte on paper, nothing on disk.
    std::fs::File::create(&big)
        .unwrap()
        .set_len((64 << 20) + 1)
        .unwrap();
    let b = big.to_str().unwrap();
    fails_naming(
        &[
            "generate",
            "--backend",
            "cpu",
            "--synthetic",
            "tiny-d64",
            "--prompt-file",
            b,
        ],
        &["--prompt-file", "big.txt", "limit of 67108864 bytes"],
    );
    fails_naming(
        &[
            "logits",
            "--backend",
            "cpu",
            "--synthetic",
            "tiny-d64",
            "--out",
            dir.path().join("o.safetensors").to_str().unwrap(),
            "--ids",
            b,
        ],
        &["--ids", "big.txt", "limit of 67108864 bytes"],
    );
}

#[test]
fn no_progress_bar_is_drawn_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids.json");
    std::fs::write(&ids, b"[1, 2, 3]").unwrap();
    let out = dir.path().join("o.safetensors");
    let run = headroom(&[
        "logits",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d64",
        "--ids",
        ids.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{err}");
    // indicatif redraws with carriage returns and escape sequences.
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err:?}");
    assert!(out.is_file());
}
