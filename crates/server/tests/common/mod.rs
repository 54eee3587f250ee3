//! Shared by the server's HTTP tests: a server on 127.0.0.1 port 0 over any
//! generator, stopped by a oneshot; reading SSE streams; a Prometheus text
//! checker.
#![allow(dead_code)]

use headroom_model::tokenizer::TextCodec;
use headroom_server::client::{self, HttpResponse};
use headroom_server::{AppState, ChatTemplate, Generator, ServerConfig};
use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct Running {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// Starts graceful shutdown.
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// A server over `generator` with the byte codec and the plain template.
pub async fn start(generator: Arc<dyn Generator>, cfg: ServerConfig, grace: Duration) -> Running {
    start_with(generator, cfg, ChatTemplate::plain(), grace).await
}

/// A server over `generator` with the byte codec and `template`.
pub async fn start_with(
    generator: Arc<dyn Generator>,
    cfg: ServerConfig,
    template: ChatTemplate,
    grace: Duration,
) -> Running {
    let state = Arc::new(AppState::new(generator, TextCodec::Bytes, template, cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(headroom_server::serve(
        listener,
        state.clone(),
        async move {
            let _ = rx.await;
        },
        grace,
    ));
    Running {
        addr,
        state,
        stop: Some(tx),
        task,
    }
}

/// The `data` payloads of a streamed response, up to and including `[DONE]`.
pub async fn stream_all(addr: SocketAddr, path: &str, body: &Value) -> (u16, Vec<String>) {
    let mut r = client::open(addr, "POST", path, Some(body.to_string().as_bytes()))
        .await
        .unwrap();
    let status = r.status;
    let mut events = Vec::new();
    while let Some(e) = r.next_event().await.unwrap() {
        events.push(e);
    }
    (status, events)
}

/// The text of streamed chunks (chat `delta.content` or completion `text`).
pub fn stream_text(events: &[String]) -> String {
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            let c = v["choices"].get(0)?.clone();
            c["delta"]["content"]
                .as_str()
                .or(c["text"].as_str())
                .map(str::to_string)
        })
        .collect()
}

/// The finish reason of a stream's last choice chunk.
pub fn stream_finish(events: &[String]) -> Option<String> {
    events
        .iter()
        .rev()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find_map(|v| {
            v["choices"].get(0)?["finish_reason"]
                .as_str()
                .map(str::to_string)
        })
}

pub async fn metrics(addr: SocketAddr) -> HashMap<String, f64> {
    let r = client::request(addr, "GET", "/metrics", None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    parse_prometheus(&r.text())
}

/// Parses the text exposition format strictly: every sample's metric has
/// a `# TYPE`, labels are `name="value"` pairs, values are numbers,
/// histogram buckets are cumulative and end at `+Inf` = `_count`.
pub fn parse_prometheus(text: &str) -> HashMap<String, f64> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (name, kind) = (it.next().unwrap(), it.next().unwrap());
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        assert!(
            !line.is_empty() && !line.starts_with('#'),
            "unexpected line {line:?}"
        );
        let (series, value) = line.rsplit_once(' ').unwrap();
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "{line}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            if !labels.is_empty() {
                let inner = labels
                    .strip_prefix('{')
                    .and_then(|l| l.strip_suffix('}'))
                    .unwrap();
                for pair in inner.split(',') {
                    let (k, v) = pair.split_once('=').unwrap();
                    assert!(
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}"
                    );
                    assert!(
                        v.starts_with('"') && v.ends_with('"') && v.len() >= 2,
                        "{line}"
                    );
                }
            }
        }
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|b| types.get(*b).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(types.contains_key(base), "no # TYPE for {name}");
        samples.insert(series.to_string(), v);
    }
    for (name, kind) in &types {
        if kind == "histogram" {
            let mut buckets: Vec<(f64, f64)> = samples
                .iter()
                .filter_map(|(k, v)| {
                    let le = k
                        .strip_prefix(&format!("{name}_bucket{{le=\""))?
                        .strip_suffix("\"}")?;
                    Some((
                        if le == "+Inf" {
                            f64::INFINITY
                        } else {
                            le.parse().unwrap()
                        },
                        *v,
                    ))
                })
                .collect();
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert!(
                buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                "{name} not cumulative"
            );
            assert_eq!(buckets.last().unwrap().1, samples[&format!("{name}_count")]);
        }
    }
    samples
}

/// Polls `/metrics` until `pred` holds (10 s at most).
pub async fn wait_metrics(
    addr: SocketAddr,
    pred: impl Fn(&HashMap<String, f64>) -> bool,
) -> HashMap<String, f64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let m = metrics(addr).await;
        if pred(&m) {
            return m;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metrics never matched: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn error_of(r: &HttpResponse) -> Value {
    let v = r
        .json()
        .unwrap_or_else(|_| panic!("not JSON: {}", r.text()));
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    assert!(v["error"]["type"].as_str().is_some(), "{v}");
    v
}
