//! `headroom generate` through the engine: `--prompts` runs many requests
//! concurrently and each gets the text it gets alone; `--json` writes one
//! line per request and a summary with the scheduler settings; a memory
//! budget refuses what can never fit while the rest completes; malformed
//! scheduler env values fall back to the defaults with a warning.

mod common;

use common::{headroom, headroom_fails, TempDir};

fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn alone_ids(prompt: &str, max_tokens: &str, tmp: &TempDir, tag: &str) -> Vec<u64> {
    let out = tmp.0.join(format!("{tag}.jsonl"));
    headroom(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        prompt,
        "--max-tokens",
        max_tokens,
        "--json",
        out.to_str().unwrap(),
    ]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "one request line and the summary");
    lines[0]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

#[test]
fn prompts_file_runs_concurrently_and_matches_each_alone() {
    let tmp = TempDir::new("gen-prompts");
    let prompts = tmp.0.join("p.jsonl");
    let texts = [
        "Hello, Headroom",
        "a",
        "The quick brown fox jumps over the lazy dog",
        "xyz",
    ];
    let mut body = String::new();
    for (i, t) in texts.iter().enumerate() {
        body.push_str(&serde_json::json!({"prompt": t, "max_tokens": 4 + i}).to_string());
        body.push('\n');
    }
    body.push_str("\n{\"ids\": [1, 2, 3], \"max_tokens\": 3}\n");
    std::fs::write(&prompts, body).unwrap();
    let out = tmp.0.join("out.jsonl");
    headroom(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompts",
        prompts.to_str().unwrap(),
        "--json",
        out.to_str().unwrap(),
        "--prefill-chunk",
        "8",
        "--step-tokens",
        "16",
    ]);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 6);
    for (i, t) in texts.iter().enumerate() {
        let l = &lines[i];
        assert_eq!(l["index"], i);
        assert_eq!(l["finish_reason"], "length");
        assert_eq!(l["prompt_tokens"], t.len());
        assert_eq!(l["completion_tokens"], 4 + i);
        assert!(l["ttft_ms"].as_f64().unwrap() > 0.0);
        assert!(l["text"].is_string());
        let ids: Vec<u64> = l["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(
            ids,
            alone_ids(t, &(4 + i).to_string(), &tmp, &format!("a{i}")),
            "request {i}"
        );
    }
    assert_eq!(lines[4]["prompt_tokens"], 3);
    let s = &lines[5]["summary"];
    assert!(s["load_seconds"].as_f64().unwrap() >= 0.0, "{s}");
    assert!(
        s["weight_bytes"].as_u64().unwrap() > 0,
        "the model's weights are counted: {s}"
    );
    let peaks = s["peak_device_bytes_per_rank"].as_array().unwrap();
    assert_eq!(peaks.len(), 1, "{s}");
    assert!(
        peaks[0].as_u64().unwrap() >= s["weight_bytes"].as_u64().unwrap(),
        "the peak holds at least the weights: {s}"
    );
    assert_eq!(s["requests"], 5);
    assert_eq!(s["completed"], 5);
    assert_eq!(s["scheduler"]["prefill_chunk"], 8);
    assert_eq!(s["scheduler"]["step_tokens"], 16);
    assert_eq!(s["scheduler"]["solo_stripe"], 2048);
    assert_eq!(s["kv"]["resolved"], "paged", "paged KV is the default");
    assert!(s["generated_tokens_per_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_budget_refuses_the_request_that_never_fits_and_runs_the_rest() {
    let tmp = TempDir::new("gen-budget");
    let prompts = tmp.0.join("p.jsonl");
    let long: Vec<u32> = (0..3000).map(|i| i % 500).collect();
    let body = format!(
        "{}\n{}\n",
        serde_json::json!({"ids": long, "max_tokens": 4}),
        serde_json::json!({"prompt": "short", "max_tokens": 4})
    );
    std::fs::write(&prompts, body).unwrap();
    let out = tmp.0.join("out.jsonl");
    headroom(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompts",
        prompts.to_str().unwrap(),
        "--json",
        out.to_str().unwrap(),
        "--memory-budget-mib",
        "1",
        // Admission by predicted bytes is contiguous KV's; a paged pool is
        // sized from the budget at start-up (`tests/kv_pool_cli.rs`).
        "--kv",
        "contiguous",
    ]);
    let lines = json_lines(&out);
    let err = lines[0]["error"].as_str().unwrap();
    assert!(
        err.contains("predicted") && err.contains("1048576 bytes"),
        "{err}"
    );
    assert_eq!(lines[1]["finish_reason"], "length");
    assert_eq!(lines[2]["summary"]["refused"], 1);
}

#[test]
fn scheduler_flags_apply_retired_env_is_ignored_and_bad_prompt_lines_fail() {
    let out = common::headroom_command()
        .args([
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompt",
            "hi",
            "--max-tokens",
            "2",
            "--prefill-chunk",
            "64",
        ])
        .env("HEADROOM_STEP_TOKENS", "99")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("prefill_chunk 64 step_tokens 8192"),
        "{stderr}"
    );
    let tmp = TempDir::new("gen-bad");
    let p = tmp.0.join("p.jsonl");
    for (body, want) in [
        ("{\"prompt\": \"a\", \"ids\": [1]}\n", "exactly one"),
        ("{\"ids\": [99999]}\n", "out of range"),
        ("{\"prompt\": \"a\", \"top_p\": 0}\n", "top-p"),
        ("not json\n", "line 1"),
        ("\n", "no prompts"),
    ] {
        std::fs::write(&p, body).unwrap();
        let err = headroom_fails(&[
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompts",
            p.to_str().unwrap(),
        ]);
        assert!(err.contains(want), "{body}: {err}");
    }
    let err = headroom_fails(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        "hi",
        "--step-tokens",
        "0",
    ]);
    assert!(err.contains("step_tokens"), "{err}");
}

/// `--batch-invariant` is reported in the summary (off by default) and, the
/// CPU being batch-invariant anyway, changes no token there.
#[test]
fn batch_invariant_is_reported_and_keeps_the_cpu_tokens() {
    let tmp = TempDir::new("gen-invariant");
    let run = |extra: &[&str], tag: &str| {
        let out = tmp.0.join(format!("{tag}.jsonl"));
        let mut args = vec![
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompt",
            "Hello, Headroom",
            "--max-tokens",
            "5",
            "--json",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        headroom(&args);
        json_lines(&out)
    };
    let plain = run(&[], "plain");
    let invariant = run(&["--batch-invariant"], "inv");
    assert_eq!(plain[1]["summary"]["batch_invariant"], false);
    assert_eq!(invariant[1]["summary"]["batch_invariant"], true);
    assert_eq!(plain[0]["ids"], invariant[0]["ids"]);
}

/// `--no-cuda-graphs` is `--cuda-graphs off`, and the two together are a
/// usage error; on the CPU either way the same tokens come out.
#[test]
fn no_cuda_graphs_is_cuda_graphs_off_and_conflicts_with_it() {
    let tmp = TempDir::new("gen-graphs");
    let run = |flags: &[&str]| {
        let out = tmp.0.join(format!("{}.jsonl", flags.join("_")));
        let mut args = vec![
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompt",
            "Hello",
            "--max-tokens",
            "4",
            "--json",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(flags);
        headroom(&args);
        json_lines(&out)
    };
    let (plain, none) = (run(&["--cuda-graphs", "on"]), run(&["--no-cuda-graphs"]));
    assert_eq!(plain[0]["ids"], none[0]["ids"]);
    let out = common::headroom_command()
        .args([
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompt",
            "Hello",
            "--no-cuda-graphs",
            "--cuda-graphs",
            "on",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--no-cuda-graphs") && err.contains("--cuda-graphs"),
        "{err}"
    );
}

/// `--step-overlap on` queues most steps ahead (counted in the summary,
/// none with it off) and draws the same tokens.
#[test]
fn step_overlap_is_counted_and_keeps_the_tokens() {
    let tmp = TempDir::new("gen-overlap");
    let run = |mode: &str| {
        let out = tmp.0.join(format!("{mode}.jsonl"));
        headroom(&[
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompt",
            "Hello, Headroom",
            "--max-tokens",
            "12",
            "--step-overlap",
            mode,
            "--json",
            out.to_str().unwrap(),
        ]);
        json_lines(&out)
    };
    let (off, on) = (run("off"), run("on"));
    assert_eq!(off[0]["ids"], on[0]["ids"]);
    assert_eq!(off[1]["summary"]["steps_queued_ahead"], 0);
    let ahead = on[1]["summary"]["steps_queued_ahead"].as_u64().unwrap();
    let steps = on[1]["summary"]["steps"].as_u64().unwrap();
    assert!(ahead > 0 && ahead < steps, "{ahead} of {steps} steps ahead");
}
