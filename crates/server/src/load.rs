//! The load generator behind `headroom bench serve`: `requests` streamed
//! completions of `prompt_len` token ids and `max_tokens` tokens from
//! `concurrency` clients against a server on this machine (loopback
//! addresses only), measuring time to first token, inter-token latency
//! (gaps between content chunks), end-to-end latency, requests/s and tokens/s.

use crate::client;
use serde::Serialize;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most requests and clients one run may use.
pub const MAX_REQUESTS: usize = 100_000;
pub const MAX_CONCURRENCY: usize = 1024;

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub addr: SocketAddr,
    pub model: Option<String>,
    pub concurrency: usize,
    pub requests: usize,
    pub prompt_len: usize,
    pub max_tokens: usize,
    /// Whole-run limit: requests not started by then are skipped, running ones fail.
    pub time_limit: Duration,
}

/// p50 / p90 / p99 / mean / max of a sample, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `ms`.
    pub fn of(mut ms: Vec<f64>) -> Percentiles {
        ms.retain(|x| x.is_finite());
        if ms.is_empty() {
            return Percentiles::default();
        }
        ms.sort_by(f64::total_cmp);
        let rank =
            |p: f64| ms[((p / 100.0 * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Percentiles {
            n: ms.len(),
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            mean: ms.iter().sum::<f64>() / ms.len() as f64,
            max: ms[ms.len() - 1],
        }
    }
}

/// What a run measured (`headroom.bench.serve/1`).
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub schema: &'static str,
    pub url: String,
    pub concurrency: usize,
    pub requests: usize,
    pub prompt_len: usize,
    pub max_tokens: usize,
    pub completed: usize,
    pub failed: usize,
    pub errors: Vec<String>,
    pub duration_s: f64,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub ttft_ms: Percentiles,
    pub itl_ms: Percentiles,
    pub e2e_ms: Percentiles,
}

#[derive(Default)]
struct Samples {
    ttft: Vec<f64>,
    itl: Vec<f64>,
    e2e: Vec<f64>,
    prompt: u64,
    completion: u64,
    completed: usize,
    errors: Vec<String>,
}

/// Refuses anything but a loopback address.
pub fn check_target(addr: &SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "bench serve only targets servers on this machine (loopback); got {addr}"
        ))
    }
}

/// Runs the load; `Err` only for a bad configuration.
pub async fn run(cfg: LoadConfig) -> Result<LoadReport, String> {
    check_target(&cfg.addr)?;
    if cfg.concurrency == 0 || cfg.concurrency > MAX_CONCURRENCY {
        return Err(format!("concurrency must be in 1..={MAX_CONCURRENCY}"));
    }
    if cfg.requests == 0 || cfg.requests > MAX_REQUESTS {
        return Err(format!("requests must be in 1..={MAX_REQUESTS}"));
    }
    if cfg.prompt_len == 0 || cfg.max_tokens == 0 {
        return Err("prompt-len and max-tokens must be at least 1".into());
    }
    let next = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(Mutex::new(Samples::default()));
    let started = Instant::now();
    let deadline = started + cfg.time_limit;
    let mut tasks = Vec::new();
    for _ in 0..cfg.concurrency.min(cfg.requests) {
        let (cfg, next, samples) = (cfg.clone(), next.clone(), samples.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= cfg.requests || Instant::now() >= deadline {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                let one = tokio::time::timeout(left, one_request(&cfg, i)).await;
                let mut s = samples.lock().unwrap_or_else(|p| p.into_inner());
                match one {
                    Ok(Ok(r)) => {
                        s.ttft.extend(r.ttft);
                        s.itl.extend(r.itl);
                        s.e2e.push(r.e2e);
                        s.prompt += r.prompt;
                        s.completion += r.completion;
                        s.completed += 1;
                    }
                    Ok(Err(e)) => s.errors.push(format!("request {i}: {e}")),
                    Err(_) => s.errors.push(format!("request {i}: past the time limit")),
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    let s = std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner()));
    let failed = cfg.requests - s.completed;
    let mut errors = s.errors;
    errors.truncate(20);
    Ok(LoadReport {
        schema: "headroom.bench.serve/1",
        url: format!("http://{}", cfg.addr),
        concurrency: cfg.concurrency,
        requests: cfg.requests,
        prompt_len: cfg.prompt_len,
        max_tokens: cfg.max_tokens,
        completed: s.completed,
        failed,
        errors,
        duration_s: secs,
        requests_per_s: s.completed as f64 / secs,
        output_tokens_per_s: s.completion as f64 / secs,
        total_tokens_per_s: (s.prompt + s.completion) as f64 / secs,
        prompt_tokens: s.prompt,
        completion_tokens: s.completion,
        ttft_ms: Percentiles::of(s.ttft),
        itl_ms: Percentiles::of(s.itl),
        e2e_ms: Percentiles::of(s.e2e),
    })
}

struct One {
    ttft: Option<f64>,
    itl: Vec<f64>,
    e2e: f64,
    prompt: u64,
    completion: u64,
}

/// Printable-ASCII ids (present in any vocabulary of 128 or more), varied per request.
fn prompt_ids(len: usize, i: usize) -> Vec<u32> {
    (0..len)
        .map(|k| 33 + ((k * 7 + i * 13) % 94) as u32)
        .collect()
}

async fn one_request(cfg: &LoadConfig, i: usize) -> Result<One, String> {
    let mut body = json!({"prompt": prompt_ids(cfg.prompt_len, i), "max_tokens": cfg.max_tokens,
                          "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    if let Some(m) = &cfg.model {
        body["model"] = json!(m);
    }
    let t0 = Instant::now();
    let mut r = client::open(
        cfg.addr,
        "POST",
        "/v1/completions",
        Some(body.to_string().as_bytes()),
    )
    .await
    .map_err(|e| e.to_string())?;
    if r.status != 200 {
        let mut text = String::new();
        while let Ok(Some(e)) = r.next_event().await {
            text.push_str(&e);
        }
        return Err(format!("HTTP {}", r.status));
    }
    let mut one = One {
        ttft: None,
        itl: Vec::new(),
        e2e: 0.0,
        prompt: 0,
        completion: 0,
    };
    let mut last: Option<Instant> = None;
    let mut done = false;
    while let Some(data) = r.next_event().await.map_err(|e| e.to_string())? {
        if data == "[DONE]" {
            done = true;
            break;
        }
        let v: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
        if let Some(err) = v.get("error") {
            return Err(err["message"].as_str().unwrap_or("error").to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            one.prompt = u["prompt_tokens"].as_u64().unwrap_or(0);
            one.completion = u["completion_tokens"].as_u64().unwrap_or(0);
        }
        let has_text = v["choices"]
            .get(0)
            .and_then(|c| c["text"].as_str())
            .is_some_and(|t| !t.is_empty());
        if has_text {
            let now = Instant::now();
            match last {
                None => one.ttft = Some(ms(now - t0)),
                Some(prev) => one.itl.push(ms(now - prev)),
            }
            last = Some(now);
        }
    }
    if !done {
        return Err("the stream ended without [DONE]".into());
    }
    one.e2e = ms(t0.elapsed());
    Ok(one)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The report as a table.
pub fn table(r: &LoadReport) -> String {
    let mut out = format!(
        "{} requests ({} completed, {} failed) at concurrency {} in {:.2} s: {:.2} req/s, {:.1} output tok/s, {:.1} total tok/s\n",
        r.requests, r.completed, r.failed, r.concurrency, r.duration_s, r.requests_per_s, r.output_tokens_per_s, r.total_tokens_per_s
    );
    out.push_str(&format!(
        "{:<10} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "metric", "n", "p50 ms", "p90 ms", "p99 ms", "mean ms", "max ms"
    ));
    for (name, p) in [("ttft", &r.ttft_ms), ("itl", &r.itl_ms), ("e2e", &r.e2e_ms)] {
        out.push_str(&format!(
            "{:<10} {:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}\n",
            name, p.n, p.p50, p.p90, p.p99, p.mean, p.max
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of((1..=100).map(f64::from).collect());
        assert_eq!(
            (p.p50, p.p90, p.p99, p.max, p.n),
            (50.0, 90.0, 99.0, 100.0, 100)
        );
        assert_eq!(Percentiles::of(vec![]).n, 0);
        assert_eq!(Percentiles::of(vec![f64::NAN, 3.0]).p99, 3.0);
    }

    #[test]
    fn only_loopback_targets() {
        assert!(check_target(&"127.0.0.1:8000".parse().unwrap()).is_ok());
        assert!(check_target(&"[::1]:8000".parse().unwrap()).is_ok());
        assert!(check_target(&"10.0.0.1:8000".parse().unwrap()).is_err());
    }
}
