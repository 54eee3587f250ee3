//! Issue 24 on the command line: outputs never replace an input (also by
//! hard link), a symlink or a device; special files given as model files
//! are refused by what they are without blocking; bad flag values are named
//! before any work (negative unsigned values, huge durations, `max_tokens`
//! 0, a bad `qualify --date`), and no partial output is left.

mod common;

use common::{headroom_command, headroom_fails, write_checkpoint, TempDir};
use headroom_model::{ModelConfig, Weights};
use std::path::Path;
use std::time::{Duration, Instant};

/// Runs `headroom args` and returns (exit code, stderr); kills it and fails
/// the test if it runs longer than 120 s (a hang on a FIFO).
fn run_bounded(args: &[&str]) -> (Option<i32>, String) {
    let mut child = headroom_command()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    (out.status.code(), stderr)
}

fn mkfifo(path: &Path) {
    assert!(std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap()
        .success());
}

#[test]
fn generate_never_overwrites_its_prompts_file_or_a_hard_link_to_it() {
    let dir = TempDir::new("safe-gen-json");
    let prompts = dir.0.join("p.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"hello\"}\n").unwrap();
    let before = std::fs::read(&prompts).unwrap();
    let p = prompts.to_str().unwrap();
    let base = ["generate", "--synthetic", "tiny-d64", "--max-tokens", "2"];
    let err = headroom_fails(&[&base[..], &["--prompts", p, "--json", p]].concat());
    assert!(
        err.contains("--json") && err.contains("one of the inputs"),
        "{err}"
    );
    let hard = dir.0.join("hard.jsonl");
    std::fs::hard_link(&prompts, &hard).unwrap();
    let h = hard.to_str().unwrap();
    let err = headroom_fails(&[&base[..], &["--prompts", p, "--json", h]].concat());
    assert!(
        err.contains("--json") && err.contains("same file as the input"),
        "{err}"
    );
    assert_eq!(std::fs::read(&prompts).unwrap(), before, "input intact");
}

#[test]
fn a_symlink_or_device_given_as_an_output_is_never_replaced() {
    let dir = TempDir::new("safe-symlink");
    let target = dir.0.join("precious.txt");
    std::fs::write(&target, "keep").unwrap();
    let link = dir.0.join("out.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = headroom_fails(&["doctor", "--json", link.to_str().unwrap()]);
    assert!(
        err.contains("--json") && err.contains("symbolic link") && err.contains("refusing"),
        "{err}"
    );
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    let err = headroom_fails(&["doctor", "--json", "/dev/null"]);
    assert!(
        err.contains("a device") && err.contains("refusing"),
        "{err}"
    );
}

#[test]
fn model_files_that_are_fifos_or_folders_are_refused_without_blocking() {
    let dir = TempDir::new("safe-fifo-model");
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    write_checkpoint(&dir.0, &cfg, &Weights::synthetic(&cfg, 1), |_| {});
    let weights = dir.0.join("model.safetensors");
    std::fs::remove_file(&weights).unwrap();
    mkfifo(&weights);
    let ids = dir.0.join("ids.json");
    std::fs::write(&ids, "[1, 2, 3]").unwrap();
    let out = dir.0.join("out").join("logits.safetensors");
    std::fs::create_dir(dir.0.join("out")).unwrap();
    let args = [
        "logits",
        "--model",
        dir.0.to_str().unwrap(),
        "--ids",
        ids.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let (code, err) = run_bounded(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("model.safetensors") && err.contains("FIFO"),
        "{err}"
    );
    std::fs::remove_file(&weights).unwrap();
    std::fs::create_dir(&weights).unwrap();
    let (code, err) = run_bounded(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is a folder") && !err.contains("No such device"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn negative_unsigned_values_and_huge_durations_name_the_flag() {
    let (code, err) = run_bounded(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        "x",
        "--max-tokens",
        "-1",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--max-tokens") && !err.contains("unexpected argument"),
        "{err}"
    );
    let (code, err) = run_bounded(&[
        "serve",
        "--synthetic",
        "tiny-d64",
        "--port",
        "0",
        "--shutdown-grace-s",
        "1e300",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--shutdown-grace-s") && err.contains("out of range"),
        "{err}"
    );
    let err = headroom_fails(&[
        "serve",
        "--synthetic",
        "tiny-d64",
        "--port",
        "0",
        "--host",
        "no-such-host.invalid",
    ]);
    assert!(err.contains("no-such-host.invalid"), "{err}");
}

#[test]
fn max_tokens_zero_is_refused_as_the_server_words_it() {
    let err = headroom_fails(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        "x",
        "--max-tokens",
        "0",
    ]);
    assert!(
        err.contains("--max-tokens must be at least 1 (got 0)"),
        "{err}"
    );
    let dir = TempDir::new("safe-max-tokens");
    let prompts = dir.0.join("p.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"a\", \"max_tokens\": 0}\n").unwrap();
    let err = headroom_fails(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompts",
        prompts.to_str().unwrap(),
    ]);
    assert!(
        err.contains("line 1: max_tokens must be at least 1 (got 0)"),
        "{err}"
    );
}

#[test]
fn qualify_checks_its_date_before_measuring_and_leaves_nothing() {
    let dir = TempDir::new("safe-qualify-date");
    let out = dir.0.join("entries");
    let start = Instant::now();
    let err = headroom_fails(&[
        "qualify",
        "--synthetic",
        "tiny-d256",
        "--lengths",
        "48",
        "--warmup",
        "0",
        "--date",
        "2024-13-45",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        err.contains("--date") && err.contains("2024-13-45"),
        "{err}"
    );
    assert!(!out.exists(), "no output folder or partial entry");
    assert!(start.elapsed() < Duration::from_secs(60));
    let file = dir.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let err = headroom_fails(&[
        "qualify",
        "--synthetic",
        "tiny-d256",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert!(
        err.contains("--out") && err.contains("a regular file"),
        "{err}"
    );
}
