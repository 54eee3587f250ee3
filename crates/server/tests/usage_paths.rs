//! Usage (`prompt_tokens`, `completion_tokens`,
//! `prompt_tokens_details.cached_tokens`) is the engine's on every way a
//! request ends: a stop string (whole, streamed with `include_usage`, each of
//! `n` choices), a stop token, the length limit; and a client that cancels a
//! stream with `include_usage` cancels the request in the engine. The fake
//! reports 2 of every prompt's tokens as cached.

mod common;

use common::*;
use headroom_server::client::{self, post_json};
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::{Generator, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

async fn server(cached: usize) -> (Running, Arc<FakeGenerator>) {
    let g = Arc::new(FakeGenerator::new(FakeConfig {
        cached_tokens: cached,
        ..FakeConfig::default()
    }));
    let mut c = ServerConfig::new("fake", 512);
    c.stop_token_ids = vec![b'E' as u32];
    (start(g.clone(), c, Duration::from_secs(5)).await, g)
}

fn usage(prompt: u64, completion: u64, cached: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion,
           "prompt_tokens_details": {"cached_tokens": cached}})
}

async fn whole(s: &Running, body: Value) -> Value {
    let r = post_json(s.addr, "/v1/completions", &body).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().unwrap()
}

/// The usage chunk of a streamed answer (the one with `usage` set).
fn streamed_usage(events: &[String]) -> Value {
    events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find(|v| !v["usage"].is_null())
        .map(|v| v["usage"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_stop_string_reports_the_engines_cached_tokens() {
    let (s, _) = server(2).await;
    // The fake draws "xy" then A, B, C, D, E (E is a stop token).
    let v = whole(&s, json!({"prompt": "xyz", "max_tokens": 10, "stop": "BC"})).await;
    assert_eq!(v["choices"][0]["text"], "xyzA");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        v["usage"],
        usage(3, 6, 2),
        "tokens up to the stop string's end"
    );

    let body = json!({"prompt": "xyz", "max_tokens": 10, "stop": "BC", "stream": true,
                      "stream_options": {"include_usage": true}});
    let (status, ev) = stream_all(s.addr, "/v1/completions", &body).await;
    assert_eq!(status, 200);
    assert_eq!(stream_text(&ev), "xyzA");
    assert_eq!(stream_finish(&ev).as_deref(), Some("stop"));
    assert_eq!(streamed_usage(&ev), usage(3, 6, 2));

    let chat = json!({"messages": [{"role": "user", "content": "q"}], "max_tokens": 30,
                      "stop": [": "]});
    let r = post_json(s.addr, "/v1/chat/completions", &chat)
        .await
        .unwrap();
    let v = r.json().unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "user");
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 2);

    let v = whole(
        &s,
        json!({"prompt": "xyz", "max_tokens": 10, "stop": "BC", "n": 2}),
    )
    .await;
    assert_eq!(v["choices"].as_array().unwrap().len(), 2);
    assert_eq!(v["usage"], usage(3, 12, 2), "prompt counted once");
}

#[tokio::test]
async fn a_stop_token_and_the_length_limit_report_the_engines_usage() {
    let (s, _) = server(2).await;
    let v = whole(&s, json!({"prompt": "xyz", "max_tokens": 10})).await;
    assert_eq!(v["choices"][0]["text"], "xyzABCD");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"], usage(3, 8, 2), "the stop token counts");

    let v = whole(&s, json!({"prompt": "xyz", "max_tokens": 4})).await;
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"], usage(3, 4, 2));

    let body = json!({"prompt": "xyz", "max_tokens": 4, "stream": true,
                      "stream_options": {"include_usage": true}});
    let (_, ev) = stream_all(s.addr, "/v1/completions", &body).await;
    assert_eq!(stream_finish(&ev).as_deref(), Some("length"));
    assert_eq!(streamed_usage(&ev), usage(3, 4, 2));
}

#[tokio::test]
async fn a_client_that_cancels_a_stream_with_usage_cancels_the_request() {
    let g = Arc::new(FakeGenerator::new(FakeConfig {
        cached_tokens: 2,
        token_delay: Duration::from_millis(20),
        ..FakeConfig::default()
    }));
    let s = start(
        g.clone(),
        ServerConfig::new("fake", 512),
        Duration::from_secs(5),
    )
    .await;
    let body = json!({"prompt": "xyz", "max_tokens": 400, "stream": true,
                      "stream_options": {"include_usage": true}});
    let mut r = client::open(
        s.addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200);
    assert!(r.next_event().await.unwrap().is_some());
    drop(r);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while g.stats().cancelled == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the engine request was not cancelled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(g.stats().running, 0);
    // The server still answers with the engine's usage afterwards.
    let v = whole(&s, json!({"prompt": "xyz", "max_tokens": 10, "stop": "BC"})).await;
    assert_eq!(v["usage"], usage(3, 6, 2));
}
