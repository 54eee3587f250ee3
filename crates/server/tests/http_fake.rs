//! The HTTP surface over the scripted fake generator: response shapes,
//! streaming, stop strings across token boundaries, every error status,
//! disconnect-cancels, metrics, concurrency and graceful shutdown.

mod common;

use common::*;
use headroom_server::client::{self, post_json};
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn cfg() -> ServerConfig {
    ServerConfig::new("fake", 512)
}

async fn fake(f: FakeConfig, c: ServerConfig) -> Running {
    start(Arc::new(FakeGenerator::new(f)), c, Duration::from_secs(5)).await
}

#[tokio::test]
async fn completion_and_chat_return_the_generated_text_with_usage() {
    let s = fake(FakeConfig::default(), cfg()).await;
    // The fake echoes the prompt's ids then A, B, C, ... (one byte token each).
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"model": "fake", "prompt": "hi", "max_tokens": 5, "temperature": 0}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "hiABC");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 5, "total_tokens": 7,
               "prompt_tokens_details": {"cached_tokens": 0}})
    );

    let r = post_json(
        s.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["choices"][0]["message"],
        json!({"role": "assistant", "content": "user"})
    );
    // "user: hi\nassistant: " is 20 bytes.
    assert_eq!(v["usage"]["prompt_tokens"], 20);

    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": [104, 105], "max_tokens": 3}),
    )
    .await
    .unwrap();
    assert_eq!(r.json().unwrap()["choices"][0]["text"], "hiA");

    let r = client::request(s.addr, "GET", "/v1/models", None)
        .await
        .unwrap();
    let v = r.json().unwrap();
    assert_eq!(
        (v["object"].as_str(), v["data"][0]["id"].as_str()),
        (Some("list"), Some("fake"))
    );
    let r = client::request(s.addr, "GET", "/health", None)
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.json().unwrap()["status"].as_str()),
        (200, Some("ok"))
    );
}

#[tokio::test]
async fn streams_carry_the_same_text_then_usage_then_done() {
    let s = fake(FakeConfig::default(), cfg()).await;
    let body = json!({"prompt": "hey", "max_tokens": 6, "stream": true, "stream_options": {"include_usage": true}});
    let (status, ev) = stream_all(s.addr, "/v1/completions", &body).await;
    assert_eq!(status, 200);
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(stream_text(&ev), "heyABC");
    assert_eq!(stream_finish(&ev).as_deref(), Some("length"));
    let usage: serde_json::Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    assert_eq!(usage["usage"]["prompt_tokens"], 3);

    let body =
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "stream": true});
    let (status, ev) = stream_all(s.addr, "/v1/chat/completions", &body).await;
    assert_eq!(status, 200);
    let first: serde_json::Value = serde_json::from_str(&ev[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(stream_text(&ev), "use");
    assert!(
        ev.iter().all(|e| !e.contains("\"usage\"")),
        "no usage without include_usage"
    );
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test]
async fn stop_strings_match_across_tokens_and_stop_ids_end_with_stop() {
    let s = fake(FakeConfig::default(), cfg()).await;
    // Tokens x, y, A, B, C, ...: "BC" spans two tokens.
    let body = json!({"prompt": "xy", "max_tokens": 10, "stop": ["BC", "zzz"]});
    let v = post_json(s.addr, "/v1/completions", &body)
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["choices"][0]["text"], "xyA");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 5);
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, ev) = stream_all(s.addr, "/v1/completions", &streamed).await;
    assert_eq!(stream_text(&ev), "xyA");
    assert_eq!(stream_finish(&ev).as_deref(), Some("stop"));
    // A stop string that never completes is released at the end.
    let v = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "xy", "max_tokens": 4, "stop": "BX"}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(
        (
            v["choices"][0]["text"].as_str(),
            v["choices"][0]["finish_reason"].as_str()
        ),
        (Some("xyAB"), Some("length"))
    );

    let s = fake(
        FakeConfig::default(),
        ServerConfig {
            stop_token_ids: vec![b'C' as u32],
            ..cfg()
        },
    )
    .await;
    let v = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "xy", "max_tokens": 10}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(v["choices"][0]["text"], "xyAB");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 5, "the stop token counts");
}

#[tokio::test]
async fn every_malformed_input_gets_its_status_and_a_json_error() {
    let small = ServerConfig {
        body_limit_bytes: 64 << 10,
        ..cfg()
    };
    let s = fake(
        FakeConfig {
            max_context: 64,
            memory_limit_tokens: Some(40),
            ..FakeConfig::default()
        },
        small,
    )
    .await;
    let a = s.addr;
    let raw = |b: &'static str| client::request(a, "POST", "/v1/completions", Some(b.as_bytes()));
    let cases: Vec<(u16, client::HttpResponse, &str)> = vec![
        (400, raw("{not json").await.unwrap(), "malformed"),
        (400, raw(r#"{"max_tokens": 3}"#).await.unwrap(), "prompt"),
        (
            400,
            post_json(a, "/v1/completions", &json!({"prompt": "a", "n": 9}))
                .await
                .unwrap(),
            "n must be in 1..=8",
        ),
        (
            400,
            post_json(
                a,
                "/v1/completions",
                &json!({"prompt": "a", "temperature": -1}),
            )
            .await
            .unwrap(),
            "temperature",
        ),
        (
            400,
            post_json(
                a,
                "/v1/completions",
                &json!({"prompt": "a", "max_tokens": "x"}),
            )
            .await
            .unwrap(),
            "max_tokens: invalid type: string \"x\", expected an integer",
        ),
        (
            400,
            post_json(a, "/v1/completions", &json!({"prompt": [1, 99999]}))
                .await
                .unwrap(),
            "vocab_size 512",
        ),
        (
            400,
            post_json(a, "/v1/completions", &json!({"prompt": ""}))
                .await
                .unwrap(),
            "no tokens",
        ),
        (
            400,
            post_json(a, "/v1/chat/completions", &json!({"messages": []}))
                .await
                .unwrap(),
            "empty",
        ),
        (
            400,
            post_json(
                a,
                "/v1/chat/completions",
                &json!({"messages": [{"role": "wizard", "content": "x"}]}),
            )
            .await
            .unwrap(),
            "wizard",
        ),
        (
            400,
            post_json(a, "/v1/completions", &json!({"prompt": "a".repeat(100)}))
                .await
                .unwrap(),
            "100 tokens",
        ),
        (
            400,
            post_json(
                a,
                "/v1/completions",
                &json!({"prompt": "abc", "max_tokens": 62}),
            )
            .await
            .unwrap(),
            "65 tokens",
        ),
        (
            400,
            post_json(
                a,
                "/v1/completions",
                &json!({"prompt": "a".repeat(50), "max_tokens": 2}),
            )
            .await
            .unwrap(),
            "bytes",
        ),
        (
            404,
            post_json(
                a,
                "/v1/completions",
                &json!({"prompt": "a", "model": "gpt-9"}),
            )
            .await
            .unwrap(),
            "gpt-9",
        ),
        (
            413,
            post_json(
                a,
                "/v1/completions",
                &json!({"prompt": "a".repeat(100_000)}),
            )
            .await
            .unwrap(),
            "limit",
        ),
        (
            404,
            client::request(a, "GET", "/v2/nothing", None)
                .await
                .unwrap(),
            "/v2/nothing",
        ),
        (
            405,
            client::request(a, "GET", "/v1/completions", None)
                .await
                .unwrap(),
            "method",
        ),
    ];
    for (status, r, needle) in cases {
        let v = error_of(&r);
        assert_eq!(r.status, status, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{needle:?} not in {msg:?}");
    }
    // Context refusals say so.
    let r = post_json(a, "/v1/completions", &json!({"prompt": "a".repeat(100)}))
        .await
        .unwrap();
    assert_eq!(error_of(&r)["error"]["code"], "context_length_exceeded");

    let busy = fake(
        FakeConfig {
            max_running: 0,
            ..FakeConfig::default()
        },
        cfg(),
    )
    .await;
    let r = post_json(busy.addr, "/v1/completions", &json!({"prompt": "a"}))
        .await
        .unwrap();
    assert_eq!(r.status, 429);
    assert!(error_of(&r)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("queue is full"));
    let m = metrics(busy.addr).await;
    assert_eq!(m["headroom_admission_refused_total"], 1.0);
    assert_eq!(m["headroom_http_errors_total{status=\"429\"}"], 1.0);
    assert_eq!(
        m["headroom_requests_total{endpoint=\"completion\",outcome=\"rejected\"}"],
        1.0
    );
}

#[tokio::test]
async fn a_client_that_disconnects_mid_stream_cancels_its_request() {
    let s = fake(
        FakeConfig {
            token_delay: Duration::from_millis(20),
            ..FakeConfig::default()
        },
        cfg(),
    )
    .await;
    let body = json!({"prompt": "go", "max_tokens": 400, "stream": true});
    let mut r = client::open(
        s.addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap();
    for _ in 0..3 {
        assert!(r.next_event().await.unwrap().is_some());
    }
    let m = metrics(s.addr).await;
    assert_eq!(
        (m["headroom_requests_running"], m["headroom_kv_blocks_used"]),
        (1.0, 1.0)
    );
    drop(r);
    let m = wait_metrics(s.addr, |m| m["headroom_engine_cancelled_total"] == 1.0).await;
    assert_eq!(
        (m["headroom_requests_running"], m["headroom_kv_blocks_used"]),
        (0.0, 0.0)
    );
    assert!(m["headroom_generation_tokens_total"] < 100.0);
    wait_metrics(s.addr, |m| {
        m.get("headroom_requests_total{endpoint=\"completion\",outcome=\"cancelled\"}")
            == Some(&1.0)
    })
    .await;
}

#[tokio::test]
async fn thirty_two_concurrent_streams_complete_and_metrics_parse() {
    let s = fake(FakeConfig::default(), cfg()).await;
    let mut tasks = Vec::new();
    for i in 0..32usize {
        let addr = s.addr;
        tasks.push(tokio::spawn(async move {
            let prompt = "p".repeat(1 + i % 7);
            let body = json!({"prompt": prompt, "max_tokens": 8 + i % 5, "stream": true, "stream_options": {"include_usage": true}});
            let (status, ev) = stream_all(addr, "/v1/completions", &body).await;
            assert_eq!(status, 200);
            let usage: serde_json::Value = serde_json::from_str(&ev[ev.len() - 2]).unwrap();
            assert_eq!(usage["usage"]["prompt_tokens"], 1 + i % 7);
            assert_eq!(usage["usage"]["completion_tokens"], 8 + i % 5);
            assert_eq!(stream_text(&ev).len(), 8 + i % 5);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let m = metrics(s.addr).await;
    assert_eq!(
        m["headroom_requests_total{endpoint=\"completion\",outcome=\"length\"}"],
        32.0
    );
    assert_eq!(m["headroom_time_to_first_token_seconds_count"], 32.0);
    let expected_itl: f64 = (0..32).map(|i| (7 + i % 5) as f64).sum();
    assert_eq!(
        m["headroom_inter_token_latency_seconds_count"],
        expected_itl
    );
    assert_eq!(m["headroom_requests_running"], 0.0);
}

#[tokio::test]
async fn shutdown_finishes_in_flight_streams_and_refuses_new_work() {
    let mut s = fake(
        FakeConfig {
            token_delay: Duration::from_millis(10),
            ..FakeConfig::default()
        },
        cfg(),
    )
    .await;
    let addr = s.addr;
    let body = json!({"prompt": "a", "max_tokens": 40, "stream": true});
    let mut r = client::open(
        addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap();
    assert!(r.next_event().await.unwrap().is_some());
    s.shutdown();
    let mut events = Vec::new();
    while let Some(e) = r.next_event().await.unwrap() {
        events.push(e);
    }
    assert_eq!(
        stream_finish(&events).as_deref(),
        Some("length"),
        "the in-flight request finished"
    );
    let result = tokio::time::timeout(Duration::from_secs(10), &mut s.task)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok());
    assert!(
        client::request(addr, "GET", "/health", None).await.is_err(),
        "no longer accepting"
    );
}

#[tokio::test]
async fn shutdown_past_the_grace_period_cancels_what_is_left() {
    let g = Arc::new(FakeGenerator::new(FakeConfig {
        token_delay: Duration::from_millis(20),
        ..FakeConfig::default()
    }));
    let mut s = start(g, cfg(), Duration::from_millis(100)).await;
    let body = json!({"prompt": "a", "max_tokens": 500, "stream": true});
    let mut r = client::open(
        s.addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap();
    assert!(r.next_event().await.unwrap().is_some());
    s.shutdown();
    let mut events = Vec::new();
    while let Some(e) = r.next_event().await.unwrap() {
        events.push(e);
    }
    assert!(
        events.iter().any(|e| e.contains("shutting down")),
        "{events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    tokio::time::timeout(Duration::from_secs(10), &mut s.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
