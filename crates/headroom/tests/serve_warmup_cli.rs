//! `headroom serve`'s start-up warm-up as a process: with `--warmup on` it
//! prints `warm-up: N requests, M steps, X ms` before listening, `/metrics`
//! then reads zero for every engine counter and a greedy completion answers
//! the same tokens as a server started with `--warmup off`; on the CPU the
//! default (`auto`) runs none and prints no warm-up line.

mod common;

use headroom_server::client;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::{Child, Stdio};

fn start(extra: &[&str]) -> (Child, SocketAddr) {
    let mut child = common::tiny_serve_command()
        .args(["--max-running", "16"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::listening_addr(&mut child);
    (child, addr)
}

/// The value of an unlabelled Prometheus sample.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// `/metrics`, then a greedy completion's text and usage.
async fn probe(addr: SocketAddr) -> (String, String, Value) {
    let m = client::request(addr, "GET", "/metrics", None)
        .await
        .unwrap();
    let metrics = m.text();
    let r = client::post_json(
        addr,
        "/v1/completions",
        &json!({"prompt": "the warm-up", "max_tokens": 12, "temperature": 0, "ignore_eos": true}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    (
        metrics,
        v["choices"][0]["text"].as_str().unwrap().to_string(),
        v["usage"].clone(),
    )
}

#[test]
fn a_warmed_up_server_starts_from_zero_and_answers_as_a_cold_one() {
    let (warm, warm_addr) = start(&["--warmup", "on"]);
    let (cold, cold_addr) = start(&["--warmup", "off"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (w, c) = rt.block_on(async { (probe(warm_addr).await, probe(cold_addr).await) });
    for name in [
        "headroom_engine_admitted_total",
        "headroom_engine_finished_total",
        "headroom_prompt_tokens_total",
        "headroom_generation_tokens_total",
        "headroom_prefix_cache_queried_tokens_total",
        "headroom_kv_blocks_used",
        "headroom_kv_blocks_cached",
        "headroom_state_slots_used",
        "headroom_prefix_cache_snapshot_slots_used",
    ] {
        assert_eq!(sample(&w.0, name), 0.0, "{name} after warm-up");
    }
    // The backend's memory, per rank: the weights and pools at least, a
    // peak no lower than what is held, and (the CPU keeps no cache) exactly
    // what is held obtained.
    let held = sample(&w.0, "headroom_device_memory_bytes{rank=\"0\"}");
    let peak = sample(&w.0, "headroom_device_memory_peak_bytes{rank=\"0\"}");
    let reserved = sample(&w.0, "headroom_device_memory_reserved_bytes{rank=\"0\"}");
    assert!(held > 0.0 && peak >= held, "held {held}, peak {peak}");
    assert_eq!(reserved, held, "the CPU backend obtains what it holds");
    assert_eq!(w.1, c.1, "same greedy text");
    assert_eq!(w.2, c.2, "same usage (nothing from a warm-up's cache)");
    let warm_err = common::stop_server(warm);
    let cold_err = common::stop_server(cold);
    let line = warm_err
        .lines()
        .find(|l| l.starts_with("warm-up: "))
        .unwrap_or_else(|| panic!("no warm-up line: {warm_err}"));
    // tiny-d64 at 256 tokens, 16 slots: 16 prompts of 192 (whole blocks of
    // the 255 a prompt may take) in one step, then decode x1, x8, x16 of 4
    // tokens (4 steps each).
    assert!(
        line.starts_with("warm-up: 41 requests, 13 steps, ")
            && line.contains("(prefill 3072 rows: 1 step, "),
        "{line}"
    );
    assert!(!cold_err.contains("warm-up"), "{cold_err}");
}

#[test]
fn serve_help_documents_the_warmup_modes() {
    let out = common::headroom(&["serve", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--warmup <auto|on|off>")
            && help.contains("on a GPU backend, off on the CPU"),
        "{help}"
    );
}
