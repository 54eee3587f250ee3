//! End to end on the real engine (CPU backend, synthetic `tiny-d256`, byte
//! tokenizer, plain chat template): HTTP answers equal what the engine
//! generates for the same request (greedy), 32 concurrent streams complete
//! with correct usage, a disconnect frees the request's KV, the engine's
//! refusals get their statuses, and `/metrics` parses.

mod common;

use common::*;
use headroom_cpu::CpuBackend;
use headroom_engine::{EngineConfig, EngineHandle, GenerateRequest, StreamEvent};
use headroom_model::tokenizer::TextCodec;
use headroom_model::{ModelConfig, Qwen35Model, Weights};
use headroom_server::client::{self, post_json};
use headroom_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn model() -> (Qwen35Model<CpuBackend>, usize) {
    let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
    let m = Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
    (m, cfg.vocab_size)
}

fn engine(cfg: EngineConfig) -> (EngineHandle, usize) {
    let (m, vocab) = model();
    (headroom_engine::spawn(m, cfg).unwrap(), vocab)
}

fn engine_cfg() -> EngineConfig {
    EngineConfig {
        max_running: 8,
        max_context: 1024,
        ..EngineConfig::default()
    }
}

async fn server(h: EngineHandle, vocab: usize) -> Running {
    start(
        Arc::new(h),
        ServerConfig::new("tiny-d256", vocab),
        Duration::from_secs(5),
    )
    .await
}

/// What the engine itself generates for `ids` (greedy), as text and token count.
async fn direct(
    h: &EngineHandle,
    ids: Vec<u32>,
    max_tokens: usize,
) -> (String, usize, &'static str) {
    let mut s = h.submit(GenerateRequest::greedy(ids, max_tokens)).unwrap();
    let mut tokens = Vec::new();
    loop {
        match s.next().await.unwrap() {
            StreamEvent::Logprobs(_) => {}
            StreamEvent::Token(t) => tokens.push(t),
            StreamEvent::Finished { reason, usage, .. } => {
                return (
                    TextCodec::Bytes.decode(&tokens).unwrap(),
                    usage.completion_tokens,
                    reason.as_str(),
                );
            }
            StreamEvent::Error(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_equal_what_the_engine_generates() {
    let (h, vocab) = engine(engine_cfg());
    let s = server(h.clone(), vocab).await;
    let prompt = "The quick brown fox";
    let (want, n, reason) = direct(&h, prompt.bytes().map(u32::from).collect(), 12).await;
    assert!(n > 0);

    let v = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 12, "temperature": 0}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(v["choices"][0]["text"], want.as_str());
    assert_eq!(v["choices"][0]["finish_reason"], reason);
    assert_eq!(v["usage"]["completion_tokens"], n);
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    let body = json!({"prompt": prompt, "max_tokens": 12, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let (_, ev) = stream_all(s.addr, "/v1/completions", &body).await;
    assert_eq!(stream_text(&ev), want);
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));

    // Chat: the plain template's text through the engine.
    let rendered = "system: Be short.\nuser: Hello\nassistant: ";
    let (want, n, _) = direct(&h, rendered.bytes().map(u32::from).collect(), 10).await;
    let messages = json!([{"role": "system", "content": "Be short."}, {"role": "user", "content": [{"type": "text", "text": "Hello"}]}]);
    let v = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"model": "tiny-d256", "messages": messages, "max_tokens": 10, "temperature": 0}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], want.as_str());
    assert_eq!(v["usage"]["prompt_tokens"], rendered.len());
    assert_eq!(v["usage"]["completion_tokens"], n);
    let (_, ev) = stream_all(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": messages, "max_tokens": 10, "temperature": 0, "stream": true}),
    )
    .await;
    assert_eq!(stream_text(&ev), want);

    // Seeded sampling is reproducible through the server.
    let sampled = json!({"prompt": prompt, "max_tokens": 8, "temperature": 0.9, "top_p": 0.9, "top_k": 20, "seed": 5});
    let a = post_json(s.addr, "/v1/completions", &sampled)
        .await
        .unwrap()
        .json()
        .unwrap();
    let b = post_json(s.addr, "/v1/completions", &sampled)
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_streams_complete_with_correct_usage() {
    let (h, vocab) = engine(engine_cfg());
    let s = server(h, vocab).await;
    let mut tasks = Vec::new();
    for i in 0..32usize {
        let addr = s.addr;
        tasks.push(tokio::spawn(async move {
            let prompt = format!("request number {i} says");
            let body = json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
            let (status, ev) = stream_all(addr, "/v1/completions", &body).await;
            assert_eq!(status, 200);
            assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
            let usage: serde_json::Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
            assert_eq!(usage["usage"]["prompt_tokens"], prompt.len());
            let n = usage["usage"]["completion_tokens"].as_u64().unwrap();
            let finish = stream_finish(&ev).unwrap();
            assert!(n == 6 && finish == "length" || n <= 6 && finish == "stop", "{n} {finish}");
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    let m = wait_metrics(s.addr, |m| m["headroom_requests_running"] == 0.0).await;
    assert_eq!(m["headroom_generation_tokens_total"], total as f64);
    assert_eq!(m["headroom_kv_blocks_used"], 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_mid_stream_frees_the_requests_kv() {
    let (h, vocab) = engine(engine_cfg());
    let s = server(h, vocab).await;
    let before = metrics(s.addr).await;
    let body =
        json!({"prompt": "a long story", "max_tokens": 1000, "temperature": 0, "stream": true});
    let mut r = client::open(
        s.addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap();
    for _ in 0..4 {
        assert!(r.next_event().await.unwrap().is_some());
    }
    let during = metrics(s.addr).await;
    assert!(during["headroom_kv_blocks_used"] > 0.0, "{during:?}");
    drop(r);
    let after = wait_metrics(s.addr, |m| {
        m["headroom_engine_cancelled_total"] == 1.0 && m["headroom_kv_blocks_used"] == 0.0
    })
    .await;
    assert_eq!(after["headroom_requests_running"], 0.0);
    assert_eq!(
        after["headroom_kv_blocks_free"],
        before["headroom_kv_blocks_free"]
    );
    assert!(after["headroom_generation_tokens_total"] < 1000.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engines_refusals_get_their_statuses() {
    // Admission by a byte budget is contiguous KV's (paged KV sizes its
    // pool from the budget at start-up instead).
    let (h, vocab) = engine(EngineConfig {
        memory_budget_bytes: Some(1),
        kv_backend: headroom_engine::KvBackendKind::Contiguous,
        ..engine_cfg()
    });
    let s = server(h, vocab).await;
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 4}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 400);
    let msg = error_of(&r)["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("budget is 1 bytes"), "{msg}");
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "x".repeat(1100)}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 400);
    assert!(error_of(&r)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("1024"));

    let (h, vocab) = engine(EngineConfig {
        max_waiting: 0,
        ..engine_cfg()
    });
    let s = server(h, vocab).await;
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 4}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 429);
    error_of(&r);
    let m = metrics(s.addr).await;
    assert_eq!(m["headroom_admission_refused_total"], 1.0);
}
