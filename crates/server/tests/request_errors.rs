//! Errors a client can act on, over HTTP: type errors name the JSON path
//! (in the message and `param`) without Rust type names, a text whose
//! tokens fall outside the model's vocabulary is a 400, and at shutdown a
//! kept-alive idle connection gets the documented 503.

mod common;

use common::*;
use headroom_server::client::{self, post_json};
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn fake(vocab: usize, token_delay: Duration) -> Running {
    start(
        Arc::new(FakeGenerator::new(FakeConfig {
            token_delay,
            ..FakeConfig::default()
        })),
        ServerConfig::new("fake", vocab),
        Duration::from_secs(5),
    )
    .await
}

#[tokio::test]
async fn type_errors_name_the_path_and_no_rust_types() {
    let s = fake(512, Duration::from_millis(1)).await;
    let cases = [
        (
            "/v1/completions",
            json!({"prompt": "hi", "max_tokens": "5"}),
            "max_tokens",
        ),
        ("/v1/completions", json!({"prompt": {"x": 1}}), "prompt"),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": 7}]}),
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
            "temperature",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "user": 5}),
            "user",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "user": {"id": 1}}),
            "user",
        ),
    ];
    for (path, body, param) in cases {
        let r = post_json(s.addr, path, &body).await.unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json().unwrap();
        assert_eq!(v["error"]["param"], param, "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.starts_with(&format!("{param}: ")), "{msg}");
        for rust in ["enum", "i64", "f64", "u32", "struct", "line 1 column"] {
            assert!(!msg.contains(rust), "{msg}");
        }
    }
}

#[tokio::test]
async fn held_out_probe_findings_are_refused_or_defaulted() {
    let s = fake(512, Duration::from_millis(1)).await;
    let chat = "/v1/chat/completions";
    // `stream: null` is the default, as for every optional field.
    let r = post_json(
        s.addr,
        chat,
        &json!({"messages": [{"role": "user", "content": "x"}], "stream": null, "max_tokens": 2}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    // A user message without content, and the deprecated `functions`, are refused by name.
    for (body, param, says) in [
        (
            json!({"messages": [{"role": "user"}]}),
            "messages",
            "messages[0].content",
        ),
        (
            json!({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}),
            "functions",
            "functions",
        ),
    ] {
        let r = post_json(s.addr, chat, &body).await.unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json().unwrap();
        assert_eq!(v["error"]["param"], param, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{v}"
        );
    }
}

#[tokio::test]
async fn a_text_outside_the_vocabulary_is_a_400() {
    // The byte codec gives 'z' id 122; the model knows 100 ids.
    let s = fake(100, Duration::from_millis(1)).await;
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "zz"}))
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json().unwrap();
    assert_eq!(v["error"]["param"], "prompt");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token id 122, outside the model's vocabulary of 100"),
        "{v}"
    );
}

/// One response read from a kept-alive connection (by `content-length`).
async fn read_response(c: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        out.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&out).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if out.len() >= end + 4 + len {
                return text;
            }
        }
        assert!(n > 0, "closed early: {text}");
    }
}

#[tokio::test]
async fn at_shutdown_a_kept_alive_connection_is_answered_503() {
    let mut s = fake(512, Duration::from_millis(10)).await;
    let mut kept = TcpStream::connect(s.addr).await.unwrap();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_response(&mut kept).await.starts_with("HTTP/1.1 200"));
    let body = json!({"prompt": "a", "max_tokens": 60, "stream": true});
    let mut inflight = client::open(
        s.addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .unwrap();
    assert!(inflight.next_event().await.unwrap().is_some());
    s.shutdown();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let req = json!({"prompt": "b", "max_tokens": 2}).to_string();
    kept.write_all(
        format!(
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{req}",
            req.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let answer = read_response(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("the server is shutting down"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    while inflight.next_event().await.unwrap().is_some() {}
    tokio::time::timeout(Duration::from_secs(10), &mut s.task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn unsupported_openai_parameters_are_400s_naming_them() {
    let s = fake(512, Duration::from_millis(1)).await;
    let cases = [
        (
            "/v1/completions",
            json!({"prompt": "hi", "echo": true, "logprobs": 1}),
            "echo",
        ),
        (
            "/v1/completions",
            json!({"prompt": "hi", "logit_bias": {"5": 3}}),
            "logit_bias",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "logprobs": 2}),
            "logprobs",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "min_p": 0.5}),
            "min_p",
        ),
    ];
    for (path, body, param) in cases {
        let r = post_json(s.addr, path, &body).await.unwrap();
        assert_eq!(r.status, 400, "{}", r.text());
        let v = r.json().unwrap();
        assert_eq!(v["error"]["param"], param, "{v}");
    }
    let r = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "echo": false, "presence_penalty": 0}),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
}
