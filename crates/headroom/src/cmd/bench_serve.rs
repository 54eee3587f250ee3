//! `headroom bench serve`: a bounded load test of a server on this machine
//! (loopback only) through `headroom_bench::serve_sweep`: streamed
//! completions of exactly `--prompt-len` token ids and `--max-tokens` tokens
//! (EOS ignored unless `--ignore-eos false`), one run per `--concurrency`
//! level; prints TTFT / inter-token / end-to-end latency p50/p90/p99,
//! requests/s and tokens/s (over every token that flowed, including those of
//! requests the time limit cut), the server's preemptions during each run
//! and its pool at the end, and with `--turns` per-turn TTFT and cached
//! tokens, as tables, the `headroom.bench.serve/3` JSON
//! with `--json` and the throughput-vs-concurrency SVG with `--plot`. Exit 1
//! on a bad flag (named) or when a request failed (an error, not the time
//! limit).

use anyhow::{bail, Context};
use headroom_bench::serve_sweep as sweep;
use headroom_bench::serve_workload::LoadConfig;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server, e.g. http://127.0.0.1:8000 (loopback addresses only).
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub url: String,
    /// The model id to send (default: none, the server's own).
    #[arg(long)]
    pub model: Option<String>,
    /// Clients sending at once: one level, or a comma-separated list (e.g. 1,16,64,256)
    /// run one after another.
    #[arg(long, default_value = "8")]
    pub concurrency: String,
    /// Requests in all.
    #[arg(long, default_value_t = 64)]
    pub requests: usize,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 128)]
    pub prompt_len: usize,
    /// Leading prompt tokens every request shares (a shared system prompt,
    /// for the server's prefix cache; 0: none).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub shared_prefix_len: usize,
    /// Tokens to generate per request.
    #[arg(long, default_value_t = 32)]
    pub max_tokens: usize,
    /// Turns per conversation: --requests conversations, each sending turn 1 (--prompt-len
    /// tokens), then each later turn resending the previous turn's prompt + --turn-len fresh
    /// tokens (the generated tokens are not resent: the completions response has their text,
    /// not their ids). The concurrency is over conversations; the report gives TTFT and
    /// cached tokens per turn.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub turns: usize,
    /// Fresh prompt tokens each turn after the first adds (with --turns).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub turn_len: usize,
    /// Ask the server to ignore EOS (`ignore_eos`) so every request generates exactly
    /// --max-tokens: true (default) or false.
    #[arg(long, default_value = "true", value_name = "true|false")]
    pub ignore_eos: String,
    /// Whole-run time limit, seconds: requests still streaming then are reported as cut
    /// (with the tokens they produced), those not started as not started.
    #[arg(long, default_value_t = 600.0, value_parser = crate::arg_checks::seconds)]
    pub time_limit_s: f64,
    /// Sample the server's pool gauges (/metrics: running, waiting, KV blocks) this often
    /// during each run, milliseconds; 0: no samples.
    #[arg(long, default_value = "1000", value_name = "MS")]
    pub sample_ms: String,
    /// Write the JSON report (headroom.bench.serve/3) here.
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot of output tok/s against concurrency here (a path ending in .svg).
    #[arg(long, value_name = "PATH.svg")]
    pub plot: Option<PathBuf>,
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

/// `--ignore-eos`: true or false.
fn parse_bool(flag: &str, v: &str) -> anyhow::Result<bool> {
    match v {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => bail!("{flag} takes true or false (got `{v}`)"),
    }
}

/// `--sample-ms`: 0 (off) or an interval up to an hour.
fn parse_sample_ms(v: &str) -> anyhow::Result<Option<Duration>> {
    match v.parse::<u64>() {
        Ok(0) => Ok(None),
        Ok(ms) if ms <= 3_600_000 => Ok(Some(Duration::from_millis(ms))),
        _ => bail!("--sample-ms takes 0 (off) or milliseconds up to 3600000 (got `{v}`)"),
    }
}

/// `--plot`: a path ending in .svg whose folder exists.
fn check_plot_path(p: &Path) -> anyhow::Result<()> {
    if p.extension().and_then(|e| e.to_str()) != Some("svg") {
        bail!(
            "--plot writes SVG: give a path ending in .svg (got {})",
            p.display()
        );
    }
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(d) = dir {
        if !d.is_dir() {
            bail!("--plot: the folder {} does not exist", d.display());
        }
    }
    Ok(())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    if !(a.time_limit_s.is_finite() && a.time_limit_s > 0.0 && a.time_limit_s <= 86_400.0) {
        bail!("--time-limit-s must be in (0, 86400]");
    }
    let levels = sweep::parse_concurrency(&a.concurrency).map_err(anyhow::Error::msg)?;
    let ignore_eos = parse_bool("--ignore-eos", &a.ignore_eos)?;
    let sample_every = parse_sample_ms(&a.sample_ms)?;
    if let Some(p) = &a.plot {
        check_plot_path(p)?;
        crate::output::check_output_path("--plot", p, &[])?;
    }
    if let Some(p) = &a.json {
        crate::output::check_output_path("--json", p, &[])?;
    }
    let addr = parse_url(&a.url)?;
    let cfg = LoadConfig {
        addr,
        model: a.model.clone(),
        concurrency: levels[0],
        requests: a.requests,
        prompt_len: a.prompt_len,
        shared_prefix_len: a.shared_prefix_len,
        max_tokens: a.max_tokens,
        ignore_eos,
        time_limit: Duration::from_secs_f64(a.time_limit_s),
        sample_every,
        turns: a.turns,
        turn_len: a.turn_len,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let report = rt
        .block_on(sweep::run(cfg, &levels))
        .map_err(anyhow::Error::msg)?;
    crate::out!("{}", sweep::table(&report))?;
    for r in &report.runs {
        for e in &r.errors {
            eprintln!("  concurrency {}: {e}", r.concurrency);
        }
    }
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report)? + "\n";
        crate::output::write_file_atomically(path, text.as_bytes())?;
    }
    if let Some(path) = &a.plot {
        crate::output::write_file_atomically(path, sweep::throughput_svg(&report).as_bytes())?;
    }
    let failed = report.failed();
    if failed > 0 {
        bail!(
            "{failed} of {} requests failed",
            report.requests * report.runs.len()
        );
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

    #[test]
    fn bools_and_plot_paths_are_checked_naming_the_flag() {
        assert!(parse_bool("--ignore-eos", "true").unwrap());
        assert!(!parse_bool("--ignore-eos", "false").unwrap());
        for bad in ["yes", "1", "", "TRUE"] {
            let e = parse_bool("--ignore-eos", bad).unwrap_err().to_string();
            assert!(e.contains("--ignore-eos"), "{e}");
        }
        assert_eq!(parse_sample_ms("0").unwrap(), None);
        assert_eq!(
            parse_sample_ms("250").unwrap(),
            Some(Duration::from_millis(250))
        );
        for bad in ["-1", "x", "3600001", ""] {
            let e = parse_sample_ms(bad).unwrap_err().to_string();
            assert!(e.contains("--sample-ms"), "{e}");
        }
        assert!(check_plot_path(Path::new("plot.svg")).is_ok());
        let e = check_plot_path(Path::new("plot.png"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--plot") && e.contains(".svg"), "{e}");
        let e = check_plot_path(Path::new("/no/such/folder/p.svg"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--plot") && e.contains("does not exist"), "{e}");
    }
}
