//! Pool use over time during a `bench serve` run: the server's `/metrics`
//! gauges (running and waiting requests, KV blocks used and free) sampled
//! every interval from the run's start until it ends. A sample the server
//! does not answer with those gauges is skipped (a server without
//! `/metrics` gives an empty series, not an error).

use headroom_server::client;
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most samples one run keeps (later ones are dropped).
pub const MAX_SAMPLES: usize = 100_000;
/// How often the sampler looks at its stop flag between samples.
const POLL: Duration = Duration::from_millis(20);

/// The gauges at one moment of a run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PoolSample {
    /// Seconds since the run started.
    pub t_s: f64,
    pub running: u64,
    pub waiting: u64,
    pub kv_blocks_used: u64,
    pub kv_blocks_free: u64,
}

/// The four gauges of a Prometheus text, at `t_s`; `None` when one is missing.
pub fn parse(text: &str, t_s: f64) -> Option<PoolSample> {
    let gauge = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let (n, v) = l.split_once(' ')?;
            let v: f64 = v.trim().parse().ok()?;
            (n == name && v.is_finite() && v >= 0.0).then_some(v as u64)
        })
    };
    Some(PoolSample {
        t_s,
        running: gauge("headroom_requests_running")?,
        waiting: gauge("headroom_requests_waiting")?,
        kv_blocks_used: gauge("headroom_kv_blocks_used")?,
        kv_blocks_free: gauge("headroom_kv_blocks_free")?,
    })
}

/// Samples `addr`'s `/metrics` every `every` from `started` until `stop` is set.
pub async fn sample(
    addr: SocketAddr,
    every: Duration,
    started: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<PoolSample> {
    let mut out = Vec::new();
    let mut next = started;
    while !stop.load(Ordering::Acquire) {
        let now = Instant::now();
        if now < next {
            tokio::time::sleep((next - now).min(POLL)).await;
            continue;
        }
        next += every;
        let t_s = started.elapsed().as_secs_f64();
        let got = tokio::time::timeout(
            every.max(POLL),
            client::request(addr, "GET", "/metrics", None),
        );
        if let Ok(Ok(r)) = got.await {
            if let Some(s) = (r.status == 200).then(|| parse(&r.text(), t_s)).flatten() {
                if out.len() < MAX_SAMPLES {
                    out.push(s);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_gauges_parse_and_a_missing_one_skips_the_sample() {
        let text = "# TYPE headroom_requests_running gauge\nheadroom_requests_running 3\n\
                    headroom_requests_waiting 1\nheadroom_kv_blocks_used 40\n\
                    headroom_kv_blocks_free 24\nheadroom_kv_blocks_used_total 9\n";
        assert_eq!(
            parse(text, 1.5),
            Some(PoolSample {
                t_s: 1.5,
                running: 3,
                waiting: 1,
                kv_blocks_used: 40,
                kv_blocks_free: 24
            })
        );
        assert_eq!(parse("headroom_requests_running 3\n", 0.0), None);
        assert_eq!(parse("data: {}\n", 0.0), None);
    }
}
