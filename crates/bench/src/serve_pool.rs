//! Pool use over time during a `bench serve` run: the server's `/metrics`
//! gauges (running and waiting requests, KV blocks used and free) sampled
//! every interval from the run's start until it ends. A sample the server
//! does not answer with those gauges is skipped (a server without
//! `/metrics` gives an empty series, not an error). Before and after a run
//! the preemption counter and the gauges are read once ([`counters`]): the
//! report gives the preemptions during the run, the pool at its end and the
//! server's device memory peak per rank (since the server started). Where
//! the server shows its GPU (`headroom_gpu_*`), each sample carries it and
//! the two readings carry the energy counter ([`crate::serve_gpu`]).

use crate::prom_text::metric_f64;
use crate::serve_gpu::{self, GpuSample};
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
    /// The GPU's clock and power then, when the server shows them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuSample>,
}

/// [`metric_f64`] as a count (truncated).
fn metric(text: &str, name: &str) -> Option<u64> {
    metric_f64(text, name).map(|v| v as u64)
}

/// The values of the metric `name` labelled `{rank="r"}` for ranks 0, 1, …
/// in order, up to the first rank missing (empty without that metric).
fn per_rank(text: &str, name: &str) -> Vec<u64> {
    (0..)
        .map_while(|r| metric(text, &format!("{name}{{rank=\"{r}\"}}")))
        .collect()
}

/// The four gauges of a Prometheus text, at `t_s`; `None` when one is missing.
pub fn parse(text: &str, t_s: f64) -> Option<PoolSample> {
    let gauge = |name: &str| metric(text, name);
    Some(PoolSample {
        t_s,
        running: gauge("headroom_requests_running")?,
        waiting: gauge("headroom_requests_waiting")?,
        kv_blocks_used: gauge("headroom_kv_blocks_used")?,
        kv_blocks_free: gauge("headroom_kv_blocks_free")?,
        gpu: serve_gpu::parse(text),
    })
}

/// The server's counters read at one moment (before or after a run).
#[derive(Debug, Clone, PartialEq)]
pub struct Counters {
    /// `headroom_preemptions_total`, when the server has it.
    pub preemptions: Option<u64>,
    /// The pool gauges, when the server has them (`t_s` is 0).
    pub pool: Option<PoolSample>,
    /// `headroom_device_memory_peak_bytes` of each rank (empty without it).
    pub device_memory_peak_bytes: Vec<u64>,
    /// `headroom_device_memory_reserved_bytes` of each rank: held plus the
    /// allocator's cache (empty without it).
    pub device_memory_reserved_bytes: Vec<u64>,
    /// `headroom_gpu_energy_joules_total`, when the server shows it.
    pub gpu_energy_j: Option<f64>,
    /// `headroom_gpu_power_limit_watts`, likewise.
    pub gpu_power_limit_w: Option<f64>,
}

/// The counters of a Prometheus text.
pub fn parse_counters(text: &str) -> Counters {
    Counters {
        preemptions: metric(text, "headroom_preemptions_total"),
        pool: parse(text, 0.0),
        device_memory_peak_bytes: per_rank(text, "headroom_device_memory_peak_bytes"),
        device_memory_reserved_bytes: per_rank(text, "headroom_device_memory_reserved_bytes"),
        gpu_energy_j: serve_gpu::energy_j(text),
        gpu_power_limit_w: serve_gpu::power_limit_w(text),
    }
}

/// Reads `addr`'s `/metrics` once; `None` when it does not answer 200
/// within a few seconds.
pub async fn counters(addr: SocketAddr) -> Option<Counters> {
    let got = tokio::time::timeout(
        Duration::from_secs(5),
        client::request(addr, "GET", "/metrics", None),
    );
    match got.await {
        Ok(Ok(r)) if r.status == 200 => Some(parse_counters(&r.text())),
        _ => None,
    }
}

/// Preemptions between two readings; `None` when either lacks the counter
/// (or it went back: a restarted server).
pub fn preemptions_between(before: Option<&Counters>, after: Option<&Counters>) -> Option<u64> {
    let (b, a) = (before?.preemptions?, after?.preemptions?);
    a.checked_sub(b)
}

/// The text summary's line of preemptions, pool use at the end, the device
/// memory peak per rank and what each rank had obtained at the end (empty
/// when the server reported none).
pub fn summary(
    preemptions: Option<u64>,
    pool_end: Option<&PoolSample>,
    device_memory_peak_bytes: &[u64],
    device_memory_reserved_bytes: &[u64],
) -> String {
    let gib = |bytes: &[u64]| {
        bytes
            .iter()
            .map(|&b| format!("{:.2}", b as f64 / (1u64 << 30) as f64))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    let mut parts = Vec::new();
    if let Some(p) = preemptions {
        parts.push(format!("{p} preemptions during the run"));
    }
    if let Some(s) = pool_end {
        parts.push(format!(
            "pool at the end: {} running, {} waiting, {} KV blocks used, {} free",
            s.running, s.waiting, s.kv_blocks_used, s.kv_blocks_free
        ));
    }
    if !device_memory_peak_bytes.is_empty() {
        parts.push(format!(
            "device memory peak since start-up {} GiB (per rank)",
            gib(device_memory_peak_bytes)
        ));
    }
    if !device_memory_reserved_bytes.is_empty() {
        parts.push(format!(
            "obtained from the device at the end, the allocator's cache included, {} GiB (per rank)",
            gib(device_memory_reserved_bytes)
        ));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("server: {}\n", parts.join("; "))
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
                kv_blocks_free: 24,
                gpu: None,
            })
        );
        assert_eq!(parse("headroom_requests_running 3\n", 0.0), None);
        assert_eq!(parse("data: {}\n", 0.0), None);
    }

    #[test]
    fn preemptions_are_the_counters_difference() {
        let at = |n: u64| parse_counters(&format!("headroom_preemptions_total {n}\n"));
        assert_eq!(at(4).pool, None);
        assert_eq!(preemptions_between(Some(&at(4)), Some(&at(11))), Some(7));
        assert_eq!(preemptions_between(Some(&at(4)), Some(&at(4))), Some(0));
        assert_eq!(
            preemptions_between(Some(&at(9)), Some(&at(2))),
            None,
            "restarted"
        );
        assert_eq!(preemptions_between(None, Some(&at(2))), None);
        let none = parse_counters("other 1\n");
        assert_eq!(preemptions_between(Some(&none), Some(&at(2))), None);
        assert_eq!(summary(None, None, &[], &[]), "");
        let pool = PoolSample {
            t_s: 0.0,
            running: 2,
            waiting: 0,
            kv_blocks_used: 10,
            kv_blocks_free: 90,
            gpu: None,
        };
        let line = summary(Some(3), Some(&pool), &[], &[]);
        assert!(
            line.contains("3 preemptions") && line.contains("10 KV blocks used"),
            "{line}"
        );
        assert!(!line.contains("device memory"), "{line}");
    }

    #[test]
    fn the_device_memory_peak_and_reserve_are_read_per_rank_in_rank_order() {
        let text = "# TYPE headroom_device_memory_peak_bytes gauge\n\
                    headroom_device_memory_peak_bytes{rank=\"1\"} 2147483648\n\
                    headroom_device_memory_peak_bytes{rank=\"0\"} 3221225472\n\
                    headroom_device_memory_reserved_bytes{rank=\"0\"} 4294967296\n\
                    headroom_device_memory_reserved_bytes{rank=\"1\"} 3758096384\n\
                    headroom_device_memory_bytes{rank=\"0\"} 5\n";
        let c = parse_counters(text);
        assert_eq!(c.device_memory_peak_bytes, [3 << 30, 2 << 30]);
        assert_eq!(c.device_memory_reserved_bytes, [4 << 30, 3584 << 20]);
        let line = summary(
            None,
            None,
            &c.device_memory_peak_bytes,
            &c.device_memory_reserved_bytes,
        );
        assert!(
            line.contains("device memory peak since start-up 3.00 / 2.00 GiB")
                && line.contains("cache included, 4.00 / 3.50 GiB"),
            "{line}"
        );
        // A gap in the ranks ends the list; no metric, no entries.
        let gap = "headroom_device_memory_peak_bytes{rank=\"1\"} 7\n";
        assert!(parse_counters(gap).device_memory_peak_bytes.is_empty());
        assert!(parse_counters("other 1\n")
            .device_memory_peak_bytes
            .is_empty());
    }
}
