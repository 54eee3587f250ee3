//! `generate` and `serve` with `--tensor-parallel N` on the CPU backend (N
//! threads joined by the in-process communicator): the engine on the group
//! generates exactly the ids it generates unsplit (several prompts batched,
//! the flag or `HEADROOM_TP`), the summary reports each rank's weights, the
//! server answers with the unsplit text; a bad N is an error (exit 1).

mod common;

use common::{headroom_fails, TempDir};
use headroom_server::client;
use serde_json::json;
use std::net::SocketAddr;
use std::process::{Child, Stdio};

fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `generate --prompts` over `prompts` with `extra` flags: every request's
/// ids, and the summary.
fn generate(
    tmp: &TempDir,
    tag: &str,
    extra: &[&str],
    env: Option<&str>,
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let prompts = tmp.0.join("p.jsonl");
    let mut body = String::new();
    for (i, t) in ["Hello, Headroom", "a", "The quick brown fox jumps", "xyz"]
        .iter()
        .enumerate()
    {
        body.push_str(&json!({"prompt": t, "max_tokens": 4 + i}).to_string());
        body.push('\n');
    }
    std::fs::write(&prompts, body).unwrap();
    let out = tmp.0.join(format!("{tag}.jsonl"));
    let mut args = vec![
        "generate",
        "--synthetic",
        "tiny-d64",
        "--backend",
        "cpu",
        "--prompts",
        prompts.to_str().unwrap(),
        "--json",
        out.to_str().unwrap(),
        "--prefill-chunk",
        "8",
        "--step-tokens",
        "16",
    ];
    args.extend(extra);
    let mut cmd = common::headroom_command();
    cmd.args(&args);
    match env {
        Some(n) => cmd.env("HEADROOM_TP", n),
        None => cmd.env_remove("HEADROOM_TP"),
    };
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut lines = json_lines(&out);
    let summary = lines.pop().unwrap()["summary"].clone();
    assert_eq!(lines.len(), 4);
    (lines.iter().map(|l| l["ids"].clone()).collect(), summary)
}

#[test]
fn generate_tp2_on_cpu_equals_tp1_and_reports_each_rank() {
    let tmp = TempDir::new("gen-tp");
    let (one, s1) = generate(&tmp, "tp1", &[], None);
    let (two, s2) = generate(&tmp, "tp2", &["--tensor-parallel", "2"], None);
    let (env, _) = generate(&tmp, "env", &[], Some("2"));
    for (i, ids) in one.iter().enumerate() {
        assert_eq!(ids.as_array().unwrap().len(), 4 + i, "request {i}");
    }
    assert_eq!(two, one, "TP=2 ids");
    assert_eq!(env, one, "HEADROOM_TP=2 ids");
    assert_eq!(s1["tensor_parallel"], 1);
    assert_eq!(s2["tensor_parallel"], 2);
    assert_eq!(s2["completed"], 4);
    let whole = s1["weight_bytes"].as_u64().unwrap();
    let ranks = s2["weight_bytes_per_rank"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for r in ranks {
        let b = r.as_u64().unwrap();
        assert!(b > 0 && b < whole, "a rank holds {b} of {whole} bytes");
    }
    let peaks = s2["peak_device_bytes_per_rank"].as_array().unwrap();
    assert_eq!(peaks.len(), 2, "one peak per rank");
}

#[test]
fn bad_tensor_parallel_is_an_error() {
    for n in ["0", "3"] {
        let e = headroom_fails(&[
            "generate",
            "--synthetic",
            "tiny-d64",
            "--backend",
            "cpu",
            "--prompt",
            "hi",
            "--max-tokens",
            "2",
            "--tensor-parallel",
            n,
        ]);
        assert!(e.contains("rank") || e.contains("divide"), "N={n}: {e}");
        let e = headroom_fails(&[
            "serve",
            "--synthetic",
            "tiny-d64",
            "--port",
            "0",
            "--tensor-parallel",
            n,
        ]);
        assert!(
            e.contains("rank") || e.contains("divide"),
            "serve N={n}: {e}"
        );
    }
    // Not a number: clap's usage error.
    let o = common::headroom_command()
        .args(["generate", "--synthetic", "tiny-d64", "--prompt", "hi"])
        .args(["--tensor-parallel", "two"])
        .output()
        .unwrap();
    assert!(!o.status.success());
}

fn start(tp: &[&str]) -> (Child, SocketAddr) {
    let mut child = common::tiny_serve_command()
        .args(tp)
        .env_remove("HEADROOM_TP")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = common::listening_addr(&mut child);
    (child, addr)
}

fn completion(tp: &[&str]) -> String {
    let (mut child, addr) = start(tp);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let text = rt.block_on(async {
        let r = client::post_json(
            addr,
            "/v1/completions",
            &json!({"model": "tiny-d64", "prompt": "Hello", "max_tokens": 6, "temperature": 0}),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json().unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 6);
        v["choices"][0]["text"].as_str().unwrap().to_string()
    });
    let _ = child.kill();
    let _ = child.wait();
    text
}

#[test]
fn serve_tp2_on_cpu_answers_the_tp1_text() {
    let one = completion(&[]);
    let two = completion(&["--tensor-parallel", "2"]);
    assert!(!one.is_empty());
    assert_eq!(two, one);
}
