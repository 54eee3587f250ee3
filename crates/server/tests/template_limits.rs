//! Template safety over HTTP: a looping chat template is stopped by its
//! fuel, output or time limit with a 400 naming the limit, rendering runs
//! off the async workers (these tests run on a one-thread runtime), and
//! `/health` answers throughout.

mod common;

use common::*;
use headroom_server::client::{self, post_json};
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::template::TemplateLimits;
use headroom_server::{ChatTemplate, ServerConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const NESTED: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
const NESTED_OUT: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}0123456789abcdef{% endfor %}{% endfor %}";

async fn server(template: &str, limits: TemplateLimits) -> Running {
    let cfg = ServerConfig {
        template_limits: limits,
        ..ServerConfig::new("fake", 512)
    };
    start_with(
        Arc::new(FakeGenerator::new(FakeConfig::default())),
        cfg,
        ChatTemplate::new(template, "", "").unwrap(),
        Duration::from_secs(5),
    )
    .await
}

/// Posts a chat request while polling `/health`; the answer's status and
/// error message, the time it took, and the slowest `/health` answer.
async fn chat_while_polling_health(s: &Running) -> (u16, String, Duration, Duration) {
    let addr = s.addr;
    let chat = tokio::spawn(async move {
        let t0 = Instant::now();
        let r = post_json(
            addr,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        )
        .await
        .unwrap();
        let msg = r.json().unwrap()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (r.status, msg, t0.elapsed())
    });
    let mut slowest = Duration::ZERO;
    while !chat.is_finished() {
        let t = Instant::now();
        let h = client::request(addr, "GET", "/health", None).await.unwrap();
        assert_eq!(h.status, 200);
        slowest = slowest.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, msg, took) = chat.await.unwrap();
    (status, msg, took, slowest)
}

#[tokio::test]
async fn a_huge_range_is_a_400() {
    let s = server(
        "{% for i in range(10**15) %}x{% endfor %}",
        TemplateLimits::default(),
    )
    .await;
    let (status, msg, _, _) = chat_while_polling_health(&s).await;
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("range has too many elements"), "{msg}");
}

#[tokio::test]
async fn a_loop_without_output_runs_out_of_fuel() {
    let s = server(
        NESTED,
        TemplateLimits {
            fuel: 2_000_000,
            ..TemplateLimits::default()
        },
    )
    .await;
    let (status, msg, took, slowest) = chat_while_polling_health(&s).await;
    assert_eq!(status, 400, "{msg}");
    assert!(
        msg.contains("exceeded its fuel limit of 2000000 instructions"),
        "{msg}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(slowest < Duration::from_millis(500), "{slowest:?}");
}

#[tokio::test]
async fn a_loop_with_output_is_stopped_by_the_time_limit_while_health_answers() {
    let s = server(
        NESTED_OUT,
        TemplateLimits {
            fuel: u64::MAX,
            time: Duration::from_millis(400),
            max_output_bytes: usize::MAX,
        },
    )
    .await;
    let (status, msg, took, slowest) = chat_while_polling_health(&s).await;
    assert_eq!(status, 400, "{msg}");
    assert!(msg.contains("exceeded its time limit of 0.4 s"), "{msg}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(slowest < Duration::from_millis(300), "{slowest:?}");
}

#[tokio::test]
async fn a_loop_with_output_is_stopped_by_the_output_limit() {
    let s = server(
        NESTED_OUT,
        TemplateLimits {
            max_output_bytes: 1 << 20,
            ..TemplateLimits::default()
        },
    )
    .await;
    let (status, msg, _, _) = chat_while_polling_health(&s).await;
    assert_eq!(status, 400, "{msg}");
    assert!(
        msg.contains("exceeded its output limit of 1048576 bytes"),
        "{msg}"
    );
}
