//! `headroom bench serve`: a bounded load test of a server on this machine
//! (loopback only) through `headroom_bench::serve_load`: streamed completions
//! of `--prompt-len` token ids and `--max-tokens` tokens from `--concurrency`
//! clients; prints TTFT / inter-token / end-to-end latency p50/p90/p99,
//! requests/s and tokens/s (over every token that flowed, including those of
//! requests the time limit cut) as a table, and the `headroom.bench.serve/2`
//! JSON with `--json`. Exit 1 only when a request failed (an error, not the
//! time limit).

use anyhow::{bail, Context};
use headroom_bench::serve_load::{self as load, LoadConfig};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server, e.g. http://127.0.0.1:8000 (loopback addresses only).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// The model id to send (default: none, the server's own).
    #[arg(long)]
    pub model: Option<String>,
    /// Clients sending at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Requests in all.
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 128)]
    pub prompt_len: usize,
    /// Tokens to generate per request.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Whole-run time limit, seconds: requests still streaming then are reported as cut
    /// (with the tokens they produced), those not started as not started.
    #[arg(long, default_value_t = 600.0)]
    pub time_limit_s: f64,
    /// Write the JSON report (headroom.bench.serve/2) here.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
}

/// `http://HOST:PORT[/...]` → a socket address.
fn parse_url(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url
        .strip_prefix("http://")
        .context("--url must start with http://")?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {hostport}"))?
        .next()
        .with_context(|| format!("{hostport} resolves to no address"))?;
    Ok(addr)
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !(a.time_limit_s.is_finite() && a.time_limit_s > 0.0 && a.time_limit_s <= 86_400.0) {
        bail!("--time-limit-s must be in (0, 86400]");
    }
    let addr = parse_url(&a.url)?;
    let cfg = LoadConfig {
        addr,
        model: a.model.clone(),
        concurrency: a.concurrency,
        requests: a.requests,
        prompt_len: a.prompt_len,
        max_tokens: a.max_tokens,
        time_limit: Duration::from_secs_f64(a.time_limit_s),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt.block_on(load::run(cfg)).map_err(anyhow::Error::msg)?;
    crate::out!("{}", load::table(&report))?;
    for e in &report.errors {
        eprintln!("  {e}");
    }
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if report.failed > 0 {
        bail!("{} of {} requests failed", report.failed, report.requests);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_to_addresses() {
        assert_eq!(parse_url("http://127.0.0.1:8000").unwrap().port(), 8000);
        assert_eq!(parse_url("http://127.0.0.1:9/v1").unwrap().port(), 9);
        assert!(parse_url("https://127.0.0.1:8000").is_err());
    }
}
