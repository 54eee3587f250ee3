//! `--api-key` over HTTP: `/v1/*` needs the bearer key (401 in OpenAI's
//! shape without it or with a wrong one), the probes stay open unless
//! protected, and a server without a key is open.

mod common;

use common::*;
use headroom_server::client::request_with;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::state::ApiKey;
use headroom_server::ServerConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

async fn server(key: Option<&str>, protect_probes: bool) -> Running {
    let cfg = ServerConfig {
        api_key: key.map(|k| ApiKey(k.into())),
        protect_probes,
        ..ServerConfig::new("fake", 512)
    };
    start(
        Arc::new(FakeGenerator::new(FakeConfig::default())),
        cfg,
        Duration::from_secs(5),
    )
    .await
}

async fn status(
    s: &Running,
    method: &str,
    path: &str,
    auth: Option<&str>,
) -> (u16, serde_json::Value) {
    let body = json!({"prompt": "hi", "max_tokens": 2}).to_string();
    let b = (method == "POST").then_some(body.as_bytes());
    let h = auth.map(|a| ("Authorization", a));
    let r = request_with(s.addr, method, path, b, h.as_slice())
        .await
        .unwrap();
    (r.status, r.json().unwrap_or_default())
}

#[tokio::test]
async fn v1_routes_need_the_bearer_key() {
    let s = server(Some("s3cret"), false).await;
    for (method, path) in [("POST", "/v1/completions"), ("GET", "/v1/models")] {
        let (st, v) = status(&s, method, path, None).await;
        assert_eq!(st, 401, "{path}: {v}");
        assert_eq!(v["error"]["code"], "invalid_api_key", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing API key"));
        let (st, v) = status(&s, method, path, Some("Bearer s3creT")).await;
        assert_eq!(st, 401, "{path}: {v}");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("incorrect API key"));
        let (st, _) = status(&s, method, path, Some("Basic s3cret")).await;
        assert_eq!(st, 401, "{path}");
        let (st, v) = status(&s, method, path, Some("Bearer s3cret")).await;
        assert_eq!(st, 200, "{path}: {v}");
    }
    // Unknown /v1 paths are refused before they are routed.
    assert_eq!(status(&s, "GET", "/v1/nothing", None).await.0, 401);
    assert_eq!(status(&s, "GET", "/health", None).await.0, 200);
    assert_eq!(status(&s, "GET", "/metrics", None).await.0, 200);
}

#[tokio::test]
async fn protected_probes_need_the_key_too() {
    let s = server(Some("k"), true).await;
    assert_eq!(status(&s, "GET", "/health", None).await.0, 401);
    assert_eq!(status(&s, "GET", "/metrics", Some("Bearer x")).await.0, 401);
    assert_eq!(status(&s, "GET", "/health", Some("Bearer k")).await.0, 200);
    assert_eq!(status(&s, "GET", "/metrics", Some("Bearer k")).await.0, 200);
}

#[tokio::test]
async fn without_a_key_everything_is_open() {
    let s = server(None, true).await;
    assert_eq!(status(&s, "POST", "/v1/completions", None).await.0, 200);
    assert_eq!(status(&s, "GET", "/health", None).await.0, 200);
}
