//! What a user reads: every command on the tiny models prints no Rust debug
//! formatting (`{ `, `Some(`, `None`, `Composed { query_block: 128 }`) on
//! stdout or stderr; `generate` prints one line of what ran and one of
//! timings (the warm-up apart from the prefill) and no JSON unless asked;
//! `serve` starts with one line of what runs; nothing draws progress lines on
//! a pipe.

mod common;

use common::{headroom, TempDir};
use std::process::Stdio;

/// Rust debug formatting that must not reach a user.
const DEBUG_PATTERNS: [&str; 4] = ["{ ", "Some(", "None", "Composed {"];

/// Runs `args` (must succeed) and returns stdout + stderr, checked for debug formatting.
fn readable(args: &[&str]) -> String {
    let out = headroom(args);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_no_debug(args, &text);
    text
}

fn assert_no_debug(what: &[&str], text: &str) {
    for p in DEBUG_PATTERNS {
        assert!(!text.contains(p), "{what:?} printed `{p}`:\n{text}");
    }
    // indicatif redraws with carriage returns and escape sequences.
    assert!(
        !text.contains('\r') && !text.contains('\u{1b}'),
        "{what:?} drew on a pipe:\n{text:?}"
    );
}

#[test]
fn model_commands_print_words() {
    let tmp = TempDir::new("human");
    let ids = tmp.0.join("ids.json");
    std::fs::write(&ids, b"[1, 2, 3, 4]").unwrap();
    let out = tmp.0.join("logits.safetensors");
    let prompts = tmp.0.join("prompts.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"hello\"}\n{\"ids\": [1, 2, 3], \"max_tokens\": 2}\n",
    )
    .unwrap();
    let (ids, out, prompts) = (
        ids.to_str().unwrap(),
        out.to_str().unwrap(),
        prompts.to_str().unwrap(),
    );
    readable(&["doctor", "--synthetic", "tiny-d64"]);
    readable(&["doctor", "--synthetic", "tiny-d256", "--backend", "cpu"]);
    readable(&[
        "doctor",
        "--attn-execution",
        "fused",
        "--attn-query-block",
        "x",
    ]);
    let logits = readable(&[
        "logits",
        "--synthetic",
        "tiny-d64",
        "--ids",
        ids,
        "--out",
        out,
    ]);
    assert!(
        logits.contains("logits on cpu: synthetic tiny-d64"),
        "{logits}"
    );
    assert!(logits.contains("timings: model load"), "{logits}");
    let one = readable(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        "hi",
        "--max-tokens",
        "4",
    ]);
    assert!(
        one.contains(
            "generate on cpu: synthetic tiny-d64; Gated DeltaNet linear attention on layers"
        ),
        "{one}"
    );
    assert!(
        one.contains("composed attention (query block 128) on layer"),
        "{one}"
    );
    assert!(one.contains("paged KV cache"), "{one}");
    assert!(one.contains("state slots"), "{one}");
    assert!(one.contains("warm-up"), "{one}");
    assert!(one.contains("prompt 2 tokens, prefill"), "{one}");
    assert!(!one.contains("\"summary\""), "JSON only with --json: {one}");
    let many = readable(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompts",
        prompts,
        "--max-tokens",
        "3",
    ]);
    assert!(
        many.contains("2 requests (2 completed, 0 failed)"),
        "{many}"
    );
    assert!(!many.contains("\"summary\""), "{many}");
}

#[test]
fn bench_and_qualify_commands_print_words() {
    let tmp = TempDir::new("human-bench");
    let prefill = tmp.0.join("prefill.json");
    let prefill = prefill.to_str().unwrap();
    readable(&[
        "bench",
        "ttft",
        "--synthetic",
        "tiny-d64",
        "--lengths",
        "40",
        "--iterations",
        "1",
        "--breakdown",
    ]);
    readable(&[
        "bench",
        "attention",
        "--backend",
        "cpu",
        "--head-dim",
        "64",
        "--q-heads",
        "4",
        "--kv-heads",
        "2",
        "--lengths",
        "24",
        "--routes",
        "composed:16,fused",
        "--iterations",
        "1",
    ]);
    readable(&[
        "bench",
        "prefill",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d64",
        "--arms",
        "fallback:16,fused",
        "--lengths",
        "40",
        "--warmup",
        "0",
        "--iterations",
        "3",
        "--json",
        prefill,
    ]);
    readable(&["bench", "validate", prefill]);
    readable(&[
        "qualify",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d64",
        "--lengths",
        "48",
        "--dry-run",
        "--out",
        tmp.0.to_str().unwrap(),
    ]);
    let qualified = tmp.0.join("entries");
    std::fs::create_dir_all(&qualified).unwrap();
    let q = readable(&[
        "qualify",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d64",
        "--lengths",
        "48",
        "--iterations",
        "3",
        "--warmup",
        "0",
        "--out",
        qualified.to_str().unwrap(),
    ]);
    assert!(q.contains("qualified: "), "{q}");
    readable(&["kernels", "--help"]);
    let help = readable(&["bench", "--help"]);
    for what in ["attention", "ttft", "prefill", "validate", "serve"] {
        assert!(help.contains(what), "{help}");
    }
    assert!(!help.contains("attention A/B over routes)"), "{help}");
}

#[test]
fn serve_starts_with_one_line_of_what_runs() {
    let mut child = common::tiny_serve_command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::listening_addr(&mut child);
    assert!(addr.ip().is_loopback());
    let stderr = common::stop_server(child);
    assert_no_debug(&["serve"], &stderr);
    let banner = stderr.lines().next().unwrap_or_default();
    assert!(
        banner.starts_with("serve on cpu: synthetic tiny-d64; ")
            && banner.contains("composed attention (query block 128) on layer")
            && banner.contains("paged KV cache")
            && banner.contains("running, context 256 tokens")
            && banner.contains("sequences fit at full context (256 tokens)"),
        "{stderr}"
    );
    // No warm-up line: `--warmup auto` runs none on the CPU.
    assert!(!stderr.contains("warm-up"), "{stderr}");
    assert!(
        !banner.contains("batch-invariant"),
        "off by default: {banner}"
    );
}

#[test]
fn serve_names_batch_invariance_on_its_start_up_line() {
    let mut child = common::tiny_serve_command()
        .arg("--batch-invariant")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::listening_addr(&mut child);
    let stderr = common::stop_server(child);
    let banner = stderr.lines().next().unwrap_or_default();
    assert!(
        banner.starts_with("serve on cpu: ") && banner.ends_with("; batch-invariant"),
        "{stderr}"
    );
}

#[test]
fn progress_events_never_reach_a_pipe_even_with_info_logs() {
    // `bench attention` reports its runs as progress events (task "bench attention").
    let out = headroom(&[
        "--log",
        "info",
        "bench",
        "attention",
        "--backend",
        "cpu",
        "--head-dim",
        "64",
        "--q-heads",
        "4",
        "--kv-heads",
        "2",
        "--lengths",
        "24",
        "--routes",
        "fused",
        "--iterations",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Logging is on (its own info line is there) ...
    assert!(stderr.contains("bench attention"), "{stderr}");
    // ... but no progress event shows, neither as a bar nor as a log line.
    assert!(!stderr.contains("attention, length"), "{stderr}");
    assert!(!stderr.contains("headroom::progress"), "{stderr}");
    assert!(
        !stderr.contains('\r') && !stderr.contains('\u{1b}'),
        "{stderr:?}"
    );
}
