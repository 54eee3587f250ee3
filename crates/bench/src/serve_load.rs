//! The load generator behind `headroom bench serve`: `requests` streamed
//! completions of exactly `prompt_len` token ids and `max_tokens` tokens
//! (with `ignore_eos`, every request runs to `max_tokens`) from `concurrency`
//! clients against a server on this machine (loopback addresses only),
//! measuring time to first token, inter-token latency (gaps between content
//! chunks), end-to-end latency, requests/s and tokens/s. One run at one
//! concurrency; [`crate::serve_sweep`] runs several. With `turns` > 1 each
//! request is a conversation of that many turns ([`crate::serve_turns`]).
//! The server's `/metrics` preemption counter is read before and after the
//! run, and the pool gauges at its end ([`crate::serve_pool`]).
//!
//! A completed request whose usage disagrees with what was asked (prompt
//! tokens other than `prompt_len`; with `ignore_eos`, completion tokens
//! other than `max_tokens`) is failed: the run would not be the workload.
//!
//! The time limit ends the run: a request still streaming then is *cut*
//! (not failed): its tokens so far count (one per content chunk, as
//! `headroom serve` streams them; the prompt counts once its first token
//! arrived), and throughput is over every token that flowed. Requests not
//! started by then are *not started*; *failed* means an error (HTTP status,
//! a broken stream, an error event).

use crate::serve_gpu::{self, GpuRun, GpuSample};
use crate::serve_outcome::{Ended, One, Percentiles};
use crate::serve_pool::{self, PoolSample};
use crate::serve_turns::{self, TurnReport, TurnTally};
use crate::serve_workload::LoadConfig;
use headroom_server::client;
use serde::Serialize;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most requests and clients one run may use.
pub const MAX_REQUESTS: usize = 100_000;
pub const MAX_CONCURRENCY: usize = 1024;
/// Most prompt tokens, and most generated tokens, per request.
pub const MAX_PROMPT_LEN: usize = 1 << 20;
/// Errors kept in the report.
const MAX_ERRORS: usize = 20;

/// What one run (one concurrency) measured: an entry of `headroom.bench.serve/3`.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub concurrency: usize,
    pub requests: usize,
    /// Requests that streamed to their end.
    pub completed: usize,
    /// Requests still streaming when the time limit ended the run.
    pub cut: usize,
    /// Requests the time limit left unstarted.
    pub not_started: usize,
    /// Requests that ended in an error.
    pub failed: usize,
    pub errors: Vec<String>,
    pub duration_s: f64,
    /// Completed requests per second.
    pub requests_per_s: f64,
    /// Generated tokens per second, over every token that flowed (cut requests' included).
    pub output_tokens_per_s: f64,
    /// Prompt and generated tokens per second, likewise.
    pub total_tokens_per_s: f64,
    /// Prompt tokens of the requests that got their first token.
    pub prompt_tokens: u64,
    /// Of the completed requests' prompt tokens, those the server's prefix
    /// cache supplied.
    pub cached_tokens: u64,
    /// Generated tokens of completed and cut requests.
    pub completion_tokens: u64,
    /// The part of `completion_tokens` that cut requests produced.
    pub cut_completion_tokens: u64,
    /// Time to first token of every request that got one (cut ones included).
    pub ttft_ms: Percentiles,
    pub itl_ms: Percentiles,
    /// End-to-end latency of completed requests.
    pub e2e_ms: Percentiles,
    /// Pool use over the run (empty when not sampled or the server has no `/metrics`).
    pub pool: Vec<PoolSample>,
    /// Turns per conversation (`requests` conversations of this many requests).
    pub turns: usize,
    /// One entry per turn index: TTFT and cached prompt tokens.
    pub per_turn: Vec<TurnReport>,
    /// Running sequences the server preempted during the run (the change of
    /// its `headroom_preemptions_total`); `None` without that counter.
    pub preemptions: Option<u64>,
    /// The server's pool gauges when the run ended (`None` without them).
    pub pool_end: Option<PoolSample>,
    /// The server's device memory peak per rank since it started, read
    /// when the run ended (`headroom_device_memory_peak_bytes`; empty
    /// without it).
    pub device_memory_peak_bytes: Vec<u64>,
    /// What each rank had obtained from the device when the run ended, the
    /// allocator's cache included (`headroom_device_memory_reserved_bytes`;
    /// empty without it).
    pub device_memory_reserved_bytes: Vec<u64>,
    /// The server's GPU over the run: energy per token, clock, power
    /// (`None` when it shows no GPU: the CPU, a tensor-parallel group).
    pub gpu: Option<GpuRun>,
}

/// The requests' outcomes, accumulated into a report.
#[derive(Debug, Default)]
pub struct Tally {
    ttft: Vec<f64>,
    itl: Vec<f64>,
    e2e: Vec<f64>,
    prompt: u64,
    cached: u64,
    completion: u64,
    cut_completion: u64,
    completed: usize,
    cut: usize,
    failed: usize,
    errors: Vec<String>,
    turns: TurnTally,
}

impl Tally {
    /// Adds request `i`'s outcome (`prompt_len`: the prompt tokens it sent).
    pub fn add(&mut self, i: usize, ended: Ended, prompt_len: usize) {
        self.add_turn(i, 0, ended, prompt_len);
    }

    /// Adds the outcome of conversation `i`'s turn `t` (from 0).
    pub fn add_turn(&mut self, i: usize, t: usize, ended: Ended, prompt_len: usize) {
        self.turns.add(t, &ended);
        match ended {
            Ended::Completed(one) => {
                let (prompt, completion) = one.usage.unwrap_or((prompt_len as u64, one.chunks));
                self.prompt += prompt;
                self.cached += one.cached;
                self.completion += completion;
                self.ttft.extend(one.ttft);
                self.itl.extend(one.itl);
                self.e2e.push(one.e2e);
                self.completed += 1;
            }
            Ended::Cut(one) => {
                if one.ttft.is_some() {
                    self.prompt += prompt_len as u64;
                }
                self.completion += one.chunks;
                self.cut_completion += one.chunks;
                self.ttft.extend(one.ttft);
                self.itl.extend(one.itl);
                self.cut += 1;
            }
            Ended::Failed(e) => {
                self.failed += 1;
                if self.errors.len() < MAX_ERRORS {
                    self.errors.push(if t == 0 {
                        format!("request {i}: {e}")
                    } else {
                        format!("request {i} turn {}: {e}", t + 1)
                    });
                }
            }
        }
    }

    /// The report of a run of `cfg` that took `secs`.
    pub fn report(self, cfg: &LoadConfig, secs: f64) -> LoadReport {
        let secs = secs.max(1e-9);
        let ended = self.completed + self.cut + self.failed;
        let sent = cfg.requests.saturating_mul(cfg.turns.max(1));
        LoadReport {
            concurrency: cfg.concurrency,
            requests: cfg.requests,
            completed: self.completed,
            cut: self.cut,
            not_started: sent.saturating_sub(ended),
            failed: self.failed,
            errors: self.errors,
            duration_s: secs,
            requests_per_s: self.completed as f64 / secs,
            output_tokens_per_s: self.completion as f64 / secs,
            total_tokens_per_s: (self.prompt + self.completion) as f64 / secs,
            prompt_tokens: self.prompt,
            cached_tokens: self.cached,
            completion_tokens: self.completion,
            cut_completion_tokens: self.cut_completion,
            ttft_ms: Percentiles::of(self.ttft),
            itl_ms: Percentiles::of(self.itl),
            e2e_ms: Percentiles::of(self.e2e),
            pool: Vec::new(),
            turns: cfg.turns.max(1),
            per_turn: self.turns.report(cfg.turns.max(1)),
            preemptions: None,
            pool_end: None,
            device_memory_peak_bytes: Vec::new(),
            device_memory_reserved_bytes: Vec::new(),
            gpu: None,
        }
    }
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

pub fn check_config(cfg: &LoadConfig) -> Result<(), String> {
    check_target(&cfg.addr)?;
    if cfg.concurrency == 0 || cfg.concurrency > MAX_CONCURRENCY {
        return Err(format!(
            "--concurrency must be in 1..={MAX_CONCURRENCY} (got {})",
            cfg.concurrency
        ));
    }
    if cfg.requests == 0 || cfg.requests > MAX_REQUESTS {
        return Err(format!(
            "--requests must be in 1..={MAX_REQUESTS} (got {})",
            cfg.requests
        ));
    }
    if cfg.prompt_len == 0 || cfg.prompt_len > MAX_PROMPT_LEN {
        return Err(format!(
            "--prompt-len must be in 1..={MAX_PROMPT_LEN} (got {})",
            cfg.prompt_len
        ));
    }
    if cfg.shared_prefix_len > cfg.prompt_len {
        return Err(format!(
            "--shared-prefix-len {} exceeds --prompt-len {}",
            cfg.shared_prefix_len, cfg.prompt_len
        ));
    }
    if cfg.max_tokens == 0 || cfg.max_tokens > MAX_PROMPT_LEN {
        return Err(format!(
            "--max-tokens must be in 1..={MAX_PROMPT_LEN} (got {})",
            cfg.max_tokens
        ));
    }
    serve_turns::check_turns(cfg, MAX_PROMPT_LEN)
}

/// Runs the load; `Err` only for a bad configuration.
pub async fn run(cfg: LoadConfig) -> Result<LoadReport, String> {
    check_config(&cfg)?;
    let next = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    let deadline = started + cfg.time_limit;
    let stop = Arc::new(AtomicBool::new(false));
    let before = serve_pool::counters(cfg.addr).await;
    let sampler = cfg
        .sample_every
        .map(|every| tokio::spawn(serve_pool::sample(cfg.addr, every, started, stop.clone())));
    let mut tasks = Vec::new();
    for _ in 0..cfg.concurrency.min(cfg.requests) {
        let (cfg, next, tally) = (cfg.clone(), next.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                if Instant::now() >= deadline {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= cfg.requests {
                    break;
                }
                for turn in 0..cfg.turns.max(1) {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let ended = one_until(&cfg, i, turn, deadline).await;
                    let go_on = matches!(ended, Ended::Completed(_));
                    let len = serve_turns::turn_prompt_len(&cfg, turn).unwrap_or(cfg.prompt_len);
                    let mut t = tally.lock().unwrap_or_else(|p| p.into_inner());
                    t.add_turn(i, turn, ended, len);
                    if !go_on {
                        break;
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Release);
    let pool = match sampler {
        Some(h) => h.await.unwrap_or_default(),
        None => Vec::new(),
    };
    let after = serve_pool::counters(cfg.addr).await;
    let t = std::mem::take(&mut *tally.lock().unwrap_or_else(|p| p.into_inner()));
    let preemptions = serve_pool::preemptions_between(before.as_ref(), after.as_ref());
    let report = t.report(&cfg, secs);
    let gpu_samples: Vec<&GpuSample> = pool.iter().filter_map(|s| s.gpu.as_ref()).collect();
    let gpu = serve_gpu::run_stats(
        &gpu_samples,
        (
            before.as_ref().and_then(|c| c.gpu_energy_j),
            after.as_ref().and_then(|c| c.gpu_energy_j),
        ),
        after.as_ref().and_then(|c| c.gpu_power_limit_w),
        report.completion_tokens,
        report.prompt_tokens + report.completion_tokens,
    );
    let (pool_end, device_memory_peak_bytes, device_memory_reserved_bytes) =
        after.map_or((None, Vec::new(), Vec::new()), |a| {
            (
                a.pool,
                a.device_memory_peak_bytes,
                a.device_memory_reserved_bytes,
            )
        });
    Ok(LoadReport {
        pool,
        preemptions,
        pool_end,
        device_memory_peak_bytes,
        device_memory_reserved_bytes,
        gpu,
        ..report
    })
}

/// Runs conversation `i`'s turn `t` until it ends or `deadline` cuts it.
async fn one_until(cfg: &LoadConfig, i: usize, t: usize, deadline: Instant) -> Ended {
    let mut one = One::default();
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, one_request(cfg, i, t, &mut one)).await {
        Ok(Ok(())) => match check_turn_usage(cfg, t, &one) {
            Ok(()) => Ended::Completed(one),
            Err(e) => Ended::Failed(e),
        },
        Ok(Err(e)) => Ended::Failed(e),
        Err(_) => Ended::Cut(one),
    }
}

/// Whether a completed request's usage is the workload asked for.
pub fn check_usage(cfg: &LoadConfig, one: &One) -> Result<(), String> {
    check_turn_usage(cfg, 0, one)
}

/// Whether a completed request of turn `t` (from 0) has the usage asked for.
pub fn check_turn_usage(cfg: &LoadConfig, t: usize, one: &One) -> Result<(), String> {
    let Some((prompt, completion)) = one.usage else {
        return Ok(());
    };
    let sent = serve_turns::turn_prompt_len(cfg, t).unwrap_or(usize::MAX);
    if prompt != sent as u64 {
        return Err(format!(
            "the server counted {prompt} prompt tokens; {sent} were sent"
        ));
    }
    if cfg.ignore_eos && completion != cfg.max_tokens as u64 {
        return Err(format!(
            "{completion} tokens generated with ignore_eos; max_tokens was {}",
            cfg.max_tokens
        ));
    }
    Ok(())
}

/// The JSON body of request `i` (a conversation's first turn).
pub fn request_body(cfg: &LoadConfig, i: usize) -> Value {
    turn_body(cfg, i, 0)
}

/// The JSON body of conversation `i`'s turn `t` (from 0).
pub fn turn_body(cfg: &LoadConfig, i: usize, t: usize) -> Value {
    let prompt = serve_turns::turn_prompt(cfg, i, t);
    let mut body = json!({"prompt": prompt, "max_tokens": cfg.max_tokens,
                          "temperature": 0, "stream": true, "stream_options": {"include_usage": true},
                          "ignore_eos": cfg.ignore_eos});
    if let Some(m) = &cfg.model {
        body["model"] = json!(m);
    }
    body
}

/// Streams conversation `i`'s turn `t` into `one` (which keeps what
/// arrived if the future is dropped).
async fn one_request(cfg: &LoadConfig, i: usize, t: usize, one: &mut One) -> Result<(), String> {
    let body = turn_body(cfg, i, t);
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
        return Err(format!("HTTP {}", r.status));
    }
    let mut last: Option<Instant> = None;
    while let Some(data) = r.next_event().await.map_err(|e| e.to_string())? {
        if data == "[DONE]" {
            one.e2e = ms(t0.elapsed());
            return Ok(());
        }
        let v: Value = serde_json::from_str(&data).map_err(|e| e.to_string())?;
        if let Some(err) = v.get("error") {
            return Err(err["message"].as_str().unwrap_or("error").to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            one.usage = Some((
                u["prompt_tokens"].as_u64().unwrap_or(0),
                u["completion_tokens"].as_u64().unwrap_or(0),
            ));
            one.cached = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
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
            one.chunks += 1;
        }
    }
    Err("the stream ended without [DONE]".into())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The report as a headline and a latency table.
pub fn table(r: &LoadReport) -> String {
    let mut out = format!(
        "{} requests at concurrency {} in {:.2} s: {} completed, {} cut by the time limit \
         ({} tokens), {} not started, {} failed\n",
        r.requests,
        r.concurrency,
        r.duration_s,
        r.completed,
        r.cut,
        r.cut_completion_tokens,
        r.not_started,
        r.failed
    );
    out.push_str(&format!(
        "{:.2} completed requests/s; over the tokens that flowed: {:.1} output tok/s, {:.1} total tok/s \
         ({} prompt, {} of them cached, + {} generated tokens)\n",
        r.requests_per_s,
        r.output_tokens_per_s,
        r.total_tokens_per_s,
        r.prompt_tokens,
        r.cached_tokens,
        r.completion_tokens
    ));
    out.push_str(&format!(
        "{:<10} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
        "metric", "n", "min ms", "p50 ms", "p90 ms", "p99 ms", "mean ms", "max ms"
    ));
    for (name, p) in [("ttft", &r.ttft_ms), ("itl", &r.itl_ms), ("e2e", &r.e2e_ms)] {
        out.push_str(&format!(
            "{:<10} {:>8} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2} {:>10.2}\n",
            name, p.n, p.min, p.p50, p.p90, p.p99, p.mean, p.max
        ));
    }
    out.push_str(&serve_turns::table(&r.per_turn));
    out.push_str(&serve_pool::summary(
        r.preemptions,
        r.pool_end.as_ref(),
        &r.device_memory_peak_bytes,
        &r.device_memory_reserved_bytes,
    ));
    out.push_str(&serve_gpu::summary(r.gpu.as_ref()));
    out
}

#[cfg(test)]
#[path = "serve_load_tests.rs"]
mod tests;
