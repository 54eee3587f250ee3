//! `ignore_eos` over HTTP (scripted fake generator): accepted on both
//! endpoints, where it drops the model's end-of-sequence ids so generation
//! runs to `max_tokens`; stop strings still apply; a non-boolean is a 400
//! naming the field.

mod common;

use common::*;
use headroom_server::client::post_json;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// A server whose end-of-turn id is `C` (the fake's tokens: prompt, then A, B, C, ...).
async fn server() -> Running {
    let c = ServerConfig {
        stop_token_ids: vec![b'C' as u32],
        ..ServerConfig::new("fake", 512)
    };
    start(
        Arc::new(FakeGenerator::new(FakeConfig::default())),
        c,
        Duration::from_secs(5),
    )
    .await
}

#[tokio::test]
async fn ignore_eos_generates_to_max_tokens_on_both_endpoints() {
    let s = server().await;
    let text = |v: &serde_json::Value| {
        v["choices"][0]["text"]
            .as_str()
            .or(v["choices"][0]["message"]["content"].as_str())
            .unwrap()
            .to_string()
    };
    for (ignore, want, finish, n) in [
        (None, "xyAB", "stop", 5),
        (Some(false), "xyAB", "stop", 5),
        (Some(true), "xyABCDEFGH", "length", 10),
    ] {
        let mut body = json!({"prompt": "xy", "max_tokens": 10});
        if let Some(b) = ignore {
            body["ignore_eos"] = json!(b);
        }
        let r = post_json(s.addr, "/v1/completions", &body).await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json().unwrap();
        assert_eq!(text(&v), want, "{body}");
        assert_eq!(v["choices"][0]["finish_reason"], finish, "{body}");
        assert_eq!(v["usage"]["completion_tokens"], n, "{body}");
        // Streamed: the same text.
        body["stream"] = json!(true);
        let (_, ev) = stream_all(s.addr, "/v1/completions", &body).await;
        assert_eq!(stream_text(&ev), want, "{body}");
        assert_eq!(stream_finish(&ev).as_deref(), Some(finish), "{body}");
    }
    // Chat: the fake echoes the 20 bytes of "user: hi\nassistant: " first.
    let chat = |ignore: bool| {
        json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 25,
               "ignore_eos": ignore})
    };
    let v = post_json(s.addr, "/v1/chat/completions", &chat(false))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(text(&v), "user: hi\nassistant: AB");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let v = post_json(s.addr, "/v1/chat/completions", &chat(true))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(text(&v), "user: hi\nassistant: ABCDE");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 25);
}

#[tokio::test]
async fn stop_strings_still_end_an_ignore_eos_request() {
    let s = server().await;
    let body = json!({"prompt": "xy", "max_tokens": 10, "ignore_eos": true, "stop": "EF"});
    let v = post_json(s.addr, "/v1/completions", &body)
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["choices"][0]["text"], "xyABCD");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn a_non_boolean_ignore_eos_is_a_400_naming_the_field() {
    let s = server().await;
    for (path, mut body) in [
        ("/v1/completions", json!({"prompt": "xy"})),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}]}),
        ),
    ] {
        for bad in [json!("true"), json!(1), json!([true]), json!({})] {
            body["ignore_eos"] = bad.clone();
            let r = post_json(s.addr, path, &body).await.unwrap();
            assert_eq!(r.status, 400, "{path} {bad}: {}", r.text());
            let v = r.json().unwrap();
            assert_eq!(v["error"]["param"], "ignore_eos", "{path} {bad}");
            assert!(
                v["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("ignore_eos"),
                "{v}"
            );
        }
    }
}
