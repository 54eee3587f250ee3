//! The real engine's supervision, over HTTP (CPU backend, synthetic
//! `tiny-d64`, byte codec): a test-only fault hook (a `StepHook` on
//! `headroom_model::step_model::ForwardingStepModel`) whose
//! step number K fails with an error or panics — shows that a failed step
//! fails its requests with a 500 naming the error while the engine goes on,
//! and that a panicked step fails its requests with a 500 naming the panic,
//! after which `/health` answers 503 with it and new requests are refused.

mod common;

use common::*;
use headroom_cpu::CpuBackend;
use headroom_engine::EngineConfig;
use headroom_model::step_model::{ForwardingStepModel, StepHook};
use headroom_model::{ModelConfig, ModelError, Qwen35Model, Weights};
use headroom_server::client::{self, post_json};
use headroom_server::ServerConfig;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy)]
enum Fault {
    Error,
    Panic,
}

/// Fails step number `at` (from 1) of the model it wraps with `fault`.
struct FaultAt {
    steps: Arc<AtomicUsize>,
    at: usize,
    fault: Fault,
}

impl StepHook for FaultAt {
    fn before_step(&self) -> Result<(), ModelError> {
        if self.steps.fetch_add(1, Ordering::SeqCst) + 1 == self.at {
            match self.fault {
                Fault::Error => {
                    return Err(ModelError::TokenOutOfRange {
                        id: 4242,
                        position: 0,
                        vocab: 1,
                    })
                }
                Fault::Panic => panic!("injected fault at step {}", self.at),
            }
        }
        Ok(())
    }
}

/// A server over the tiny model whose step `at` meets `fault`, and its step counter.
async fn server(at: usize, fault: Fault) -> (Running, Arc<AtomicUsize>) {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let inner = Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
    let steps = Arc::new(AtomicUsize::new(0));
    let model = ForwardingStepModel {
        inner,
        hook: FaultAt {
            steps: steps.clone(),
            at,
            fault,
        },
    };
    let h = headroom_engine::spawn(
        model,
        EngineConfig {
            max_running: 4,
            max_context: 2048,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let s = start(
        Arc::new(h),
        ServerConfig::new("tiny-d64", cfg.vocab_size),
        Duration::from_secs(5),
    )
    .await;
    (s, steps)
}

fn long(addr: SocketAddr, max_tokens: usize) -> tokio::task::JoinHandle<(u16, Value)> {
    tokio::spawn(async move {
        let r = post_json(
            addr,
            "/v1/completions",
            &json!({"prompt": "a longer prompt", "max_tokens": max_tokens}),
        )
        .await
        .unwrap();
        (r.status, r.json().unwrap())
    })
}

async fn health(addr: SocketAddr) -> (u16, Value) {
    let h = client::request(addr, "GET", "/health", None).await.unwrap();
    (h.status, h.json().unwrap())
}

fn message(v: &Value) -> &str {
    v["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_step_fails_its_requests_with_500_and_the_engine_goes_on() {
    // Step 30: both requests are decoding (each runs 200 steps unless failed).
    let (s, steps) = server(30, Fault::Error).await;
    let (a, b) = (long(s.addr, 200), long(s.addr, 200));
    for t in [a, b] {
        let (status, v) = t.await.unwrap();
        assert_eq!(status, 500, "{v}");
        assert_eq!(v["error"]["type"], "server_error");
        assert!(message(&v).contains("token id 4242"), "{v}");
    }
    assert!(steps.load(Ordering::SeqCst) >= 30);
    assert_eq!(health(s.addr).await.0, 200);
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "again", "max_tokens": 4}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json().unwrap()["usage"]["completion_tokens"], 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicked_step_fails_its_requests_and_health_turns_503() {
    let (s, _) = server(30, Fault::Panic).await;
    // A request that finishes before the fault is answered normally.
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "a", "max_tokens": 3}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(health(s.addr).await.0, 200);
    let (a, b) = (long(s.addr, 200), long(s.addr, 200));
    for t in [a, b] {
        let (status, v) = t.await.unwrap();
        assert_eq!(status, 500, "{v}");
        assert!(
            message(&v).contains("an engine step panicked: injected fault at step 30"),
            "{v}"
        );
    }
    let (status, v) = health(s.addr).await;
    assert_eq!(status, 503, "{v}");
    assert_eq!(v["status"], "unhealthy");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("injected fault at step 30"),
        "{v}"
    );
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "a", "max_tokens": 3}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
}
