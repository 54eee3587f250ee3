//! Malformed input through the built binary (issue 13): every case must end
//! with exit 1 (or a clean exit 0 where the input is legal), one message
//! naming the input, no panic text, within a memory limit (`ulimit -v`) and a
//! time limit (`timeout`), so an allocation sized by unchecked input or a
//! hang fails the test instead of the machine.

#![cfg(unix)]

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Address-space limit of every run: 4 GiB.
const LIMIT_KIB: u64 = 4 << 20;

/// `headroom args...` under `ulimit -v` and `timeout 120`, with a clean
/// attention environment plus `env`.
fn run_limited(args: &[&OsStr], env: &[(&str, &OsStr)]) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg("sh")
        .arg("-c")
        .arg(format!("ulimit -v {LIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .stdin(Stdio::null());
    common::hermetic(&mut cmd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run headroom")
}

fn os(args: &[&str]) -> Vec<&'static OsStr> {
    args.iter()
        .map(|a| OsStr::new(Box::leak(a.to_string().into_boxed_str())))
        .collect()
}

/// Runs `args`; asserts exit 1, no panic, and that stderr names every `needles`.
fn fails_naming(args: &[&str], needles: &[&str]) -> String {
    let out = run_limited(&os(args), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert!(!stderr.contains("memory allocation"), "{args:?}: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: expected `{n}` in: {stderr}");
    }
    stderr
}

fn succeeds(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    let out = run_limited(&os(args), env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    out
}

fn model_dir_with(config: serde_json::Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    dir
}

fn tiny_config() -> serde_json::Value {
    let c = headroom_model::ModelConfig::synthetic("tiny-d64").unwrap();
    c.to_hf_json()
}

#[test]
fn config_sizes_are_bounded_before_allocating() {
    for layers in [
        serde_json::json!(1_000_000_000u64),
        serde_json::json!(u64::MAX),
    ] {
        let mut c = tiny_config();
        c.as_object_mut().unwrap().remove("layer_types");
        c["num_hidden_layers"] = layers;
        let dir = model_dir_with(c);
        let m = dir.path().to_str().unwrap();
        fails_naming(&["doctor", "--model", m], &["num_hidden_layers", "limit"]);
    }
    let mut c = tiny_config();
    c["max_position_embeddings"] = 0.into();
    let dir = model_dir_with(c);
    fails_naming(
        &["doctor", "--model", dir.path().to_str().unwrap()],
        &["max_position_embeddings"],
    );
}

#[test]
fn a_config_json_that_is_a_fifo_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.json");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    fails_naming(
        &["doctor", "--model", dir.path().to_str().unwrap()],
        &["config.json", "not a regular file"],
    );
}

#[test]
fn synthetic_layer_counts_are_bounded() {
    for n in [
        "1000000000",
        "18446744073709551615",
        "99999999999999999999999",
    ] {
        let name = format!("qwen3.6-35b-a3b:layers={n}");
        fails_naming(&["doctor", "--synthetic", &name], &["layers", n]);
    }
}

#[test]
fn bench_attention_sizes_are_bounded_before_allocating() {
    let base = ["bench", "attention", "--warmup", "0", "--iterations", "1"];
    let huge = "1000000000";
    let max = "18446744073709551615";
    for (flag, value, needle) in [
        ("--lengths", huge, "length 1000000000"),
        ("--lengths", max, "length"),
        ("--history", huge, "history 1000000000"),
        ("--history", max, "--history"),
        ("--head-dim", huge, "--head-dim"),
        ("--head-dim", max, "--head-dim"),
        ("--q-heads", huge, "--q-heads"),
        ("--kv-heads", max, "--kv-heads"),
        ("--gemm-baseline", huge, "--gemm-baseline"),
        ("--gemm-baseline", max, "--gemm-baseline"),
        ("--gemm-baseline", "0", "--gemm-baseline 0"),
    ] {
        let mut args = base.to_vec();
        args.extend([flag, value]);
        fails_naming(&args, &[needle]);
    }
}

#[test]
fn bench_json_output_is_checked_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/folder/out.json");
    let start = std::time::Instant::now();
    fails_naming(
        &[
            "bench",
            "attention",
            "--lengths",
            "4096",
            "--json",
            missing.to_str().unwrap(),
        ],
        &["--json", "does not exist"],
    );
    assert!(start.elapsed().as_secs() < 30, "refused before running");
    fails_naming(
        &["bench", "attention", "--json", dir.path().to_str().unwrap()],
        &["--json", "is a folder"],
    );
}

#[test]
fn old_flag_spellings_still_work() {
    let out = succeeds(
        &[
            "bench",
            "attention",
            "--lengths",
            "8",
            "--head-dim",
            "8",
            "--q-heads",
            "2",
            "--kv-heads",
            "1",
            "--routes",
            "composed:0",
            "--warmup",
            "0",
            "--iters",
            "1",
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("composed"));
}

#[test]
fn stdout_write_errors_never_panic() {
    // A full disk: exit 1 with one message.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    if let Ok(full) = full {
        let out = common::headroom_command()
            .args(["doctor", "--synthetic", "tiny-d64"])
            .stdout(full)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("writing to stdout"), "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A closed pipe (`| head -0`): quiet exit 0.
    let mut child = common::headroom_command()
        .args(["doctor", "--synthetic", "tiny-d64"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("error"),
        "{stderr}"
    );
}

#[test]
fn hostile_registry_folders_neither_hang_nor_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("loop")).unwrap();
    assert!(Command::new("mkfifo")
        .arg(dir.path().join("pipe.toml"))
        .status()
        .unwrap()
        .success());
    std::fs::write(
        dir.path().join("bad\x1b[31m.toml"),
        "id = \"x\\u001b[2J\"\n",
    )
    .unwrap();
    let d = dir.path().to_str().unwrap();
    let out = succeeds(
        &[
            "doctor",
            "--synthetic",
            "tiny-d64",
            "--qualifications",
            d,
            "--json",
        ],
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("pipe.toml").count(), 1, "{stdout}");
    assert!(stdout.contains("not a regular file"), "{stdout}");
    let text = succeeds(
        &["doctor", "--synthetic", "tiny-d64", "--qualifications", d],
        &[],
    );
    assert!(!text.stdout.contains(&0x1b), "raw escape printed");
}

#[test]
fn non_utf8_environment_is_reported_not_dropped() {
    let bad = OsStr::from_bytes(b"fu\xffsed");
    let out = succeeds(
        &["doctor", "--synthetic", "tiny-d64"],
        &[("HEADROOM_ATTN_EXECUTION", bad)],
    );
    let all =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        all.contains("HEADROOM_ATTN_EXECUTION is not valid UTF-8"),
        "{all}"
    );
    // A folder whose name is not UTF-8 is used, not dropped: missing, it is reported.
    let folder = OsStr::from_bytes(b"/nonexistent/qual\xff");
    let out = succeeds(
        &["doctor", "--synthetic", "tiny-d64"],
        &[("HEADROOM_QUALIFICATIONS", folder)],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("/nonexistent/qual"), "{text}");
}

#[test]
fn no_colour_escapes_to_a_pipe() {
    let out = succeeds(
        &[
            "doctor",
            "--synthetic",
            "tiny-d64",
            "--attn-execution",
            "bogus",
            "--log",
            "info",
        ],
        &[],
    );
    assert!(
        !out.stderr.contains(&0x1b),
        "ANSI in {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn doctor_reports_an_unavailable_cuda_backend() {
    let out = succeeds(
        &[
            "doctor",
            "--synthetic",
            "tiny-d64",
            "--backend",
            "cuda",
            "--json",
        ],
        &[],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cuda_ok = v["backends"]["cuda"]["available"].as_bool().unwrap();
    let warned = v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("backend cuda was asked for"));
    assert_eq!(warned, !cuda_ok, "{v}");
}

#[test]
fn kernels_build_for_an_unsupported_arch_is_one_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("artifact");
    for arch in ["sm_80", "sm_90"] {
        let stderr = fails_naming(
            &[
                "kernels",
                "build",
                "--arch",
                arch,
                "--out",
                out_dir.to_str().unwrap(),
            ],
            &[arch, "sm_90a"],
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!Path::new(&out_dir).exists());
    }
}
