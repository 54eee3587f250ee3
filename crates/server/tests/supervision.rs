//! A supervised engine, by fault injection into the fake generator: a
//! failed step fails its requests with a 500 naming the error and the
//! server goes on; a panicked step fails its requests with a 500 and
//! `/health` turns 503, new requests are refused 503.

mod common;

use common::*;
use headroom_server::client::{self, post_json};
use headroom_server::fake::{FakeConfig, FakeGenerator, Fault};
use headroom_server::ServerConfig;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

async fn setup() -> (Arc<FakeGenerator>, Running) {
    let g = Arc::new(FakeGenerator::new(FakeConfig {
        token_delay: Duration::from_millis(20),
        ..FakeConfig::default()
    }));
    let s = start(
        g.clone(),
        ServerConfig::new("fake", 512),
        Duration::from_secs(5),
    )
    .await;
    (g, s)
}

fn long(addr: SocketAddr) -> tokio::task::JoinHandle<(u16, serde_json::Value)> {
    tokio::spawn(async move {
        let r = post_json(
            addr,
            "/v1/completions",
            &json!({"prompt": "a", "max_tokens": 100}),
        )
        .await
        .unwrap();
        (r.status, r.json().unwrap())
    })
}

async fn wait_running(g: &FakeGenerator, n: usize) {
    use headroom_server::Generator;
    for _ in 0..200 {
        if g.stats().running == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} requests never ran");
}

#[tokio::test]
async fn a_failed_step_fails_its_requests_with_500_and_the_server_recovers() {
    let (g, s) = setup().await;
    let a = long(s.addr);
    let b = long(s.addr);
    let mut streamed = client::open(
        s.addr,
        "POST",
        "/v1/completions",
        Some(
            json!({"prompt": "a", "max_tokens": 100, "stream": true})
                .to_string()
                .as_bytes(),
        ),
    )
    .await
    .unwrap();
    wait_running(&g, 3).await;
    g.inject_fault(Fault::StepError("injected step failure".into()));
    for t in [a, b] {
        let (status, v) = t.await.unwrap();
        assert_eq!(status, 500, "{v}");
        assert_eq!(v["error"]["type"], "server_error");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("injected step failure"),
            "{v}"
        );
    }
    let mut events = Vec::new();
    while let Some(e) = streamed.next_event().await.unwrap() {
        events.push(e);
    }
    assert!(
        events.iter().any(|e| e.contains("injected step failure")),
        "{events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let h = client::request(s.addr, "GET", "/health", None)
        .await
        .unwrap();
    assert_eq!(h.status, 200, "{}", h.text());
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "a", "max_tokens": 3}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn a_panicked_step_fails_its_requests_and_health_turns_503() {
    let (g, s) = setup().await;
    let a = long(s.addr);
    wait_running(&g, 1).await;
    let h = client::request(s.addr, "GET", "/health", None)
        .await
        .unwrap();
    assert_eq!(h.status, 200);
    g.inject_fault(Fault::Panic("step panicked: injected".into()));
    let (status, v) = a.await.unwrap();
    assert_eq!(status, 500, "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("the engine failed") && msg.contains("step panicked: injected"),
        "{v}"
    );
    let h = client::request(s.addr, "GET", "/health", None)
        .await
        .unwrap();
    assert_eq!(h.status, 503, "{}", h.text());
    let hv = h.json().unwrap();
    assert_eq!(hv["status"], "unhealthy");
    assert!(
        hv["error"].as_str().unwrap().contains("step panicked"),
        "{hv}"
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
