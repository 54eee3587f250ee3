//! The server's Prometheus metrics: request counts by endpoint and outcome,
//! HTTP error counts by status, TTFT and inter-token latency histograms,
//! and the engine's gauges and counters (running, waiting, KV blocks and
//! state slots used and free, prefix-cache tokens and snapshot slots,
//! preemptions, tokens, admission refusals), and the GPU's clock, power and
//! energy where the server has a reader for them ([`GpuMetrics`]),
//! rendered in the text exposition format.

use crate::exposition::write_metric;
use crate::generator::EngineStats;
use crate::gpu_metrics::GpuMetrics;
use headroom_engine::RankMemory;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Upper bounds (seconds) of the latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A cumulative histogram of seconds.
#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        if !secs.is_finite() || secs < 0.0 {
            return;
        }
        for (i, &b) in LATENCY_BUCKETS.iter().enumerate() {
            if secs <= b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (i, &b) in LATENCY_BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.counts[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

#[derive(Debug, Default)]
struct Inner {
    requests: BTreeMap<(&'static str, &'static str), u64>,
    http_errors: BTreeMap<u16, u64>,
    ttft: Histogram,
    itl: Histogram,
}

/// The server's metrics (shared by every handler).
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    gpu: Option<GpuMetrics>,
}

/// How a request ended, for `headroom_requests_total{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Stop,
    Length,
    /// The client went away before the end.
    Cancelled,
    /// Refused before it ran (a 4xx/5xx answer).
    Rejected,
    /// The engine failed mid-request.
    Error,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Stop => "stop",
            Outcome::Length => "length",
            Outcome::Cancelled => "cancelled",
            Outcome::Rejected => "rejected",
            Outcome::Error => "error",
        }
    }
}

impl Metrics {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        let mut g = match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g);
    }

    /// Adds the GPU's lines, read at each scrape.
    pub fn set_gpu(&mut self, gpu: GpuMetrics) {
        self.gpu = Some(gpu);
    }

    pub fn request(&self, endpoint: &'static str, outcome: Outcome) {
        self.with(|m| *m.requests.entry((endpoint, outcome.label())).or_default() += 1);
    }

    pub fn http_error(&self, status: u16) {
        self.with(|m| *m.http_errors.entry(status).or_default() += 1);
    }

    pub fn ttft(&self, secs: f64) {
        self.with(|m| m.ttft.observe(secs));
    }

    pub fn inter_token(&self, secs: f64) {
        self.with(|m| m.itl.observe(secs));
    }

    /// The exposition text, with the engine's `stats`.
    pub fn render(&self, stats: &EngineStats) -> String {
        let mut out = String::new();
        self.with(|m| {
            out.push_str("# HELP headroom_requests_total Completion requests by endpoint and outcome.\n# TYPE headroom_requests_total counter\n");
            for ((endpoint, outcome), n) in &m.requests {
                let _ = writeln!(
                    out,
                    "headroom_requests_total{{endpoint=\"{endpoint}\",outcome=\"{outcome}\"}} {n}"
                );
            }
            out.push_str("# HELP headroom_http_errors_total Error answers by HTTP status.\n# TYPE headroom_http_errors_total counter\n");
            for (status, n) in &m.http_errors {
                let _ = writeln!(out, "headroom_http_errors_total{{status=\"{status}\"}} {n}");
            }
            m.ttft.render(
                &mut out,
                "headroom_time_to_first_token_seconds",
                "Seconds from request arrival to the first generated token.",
            );
            m.itl.render(
                &mut out,
                "headroom_inter_token_latency_seconds",
                "Seconds between consecutive generated tokens of a request.",
            );
        });
        let gauges: [(&str, &str, &str, f64); 21] = [
            (
                "headroom_requests_running",
                "gauge",
                "Requests the engine is running.",
                stats.running as f64,
            ),
            (
                "headroom_requests_waiting",
                "gauge",
                "Requests waiting for admission.",
                stats.waiting as f64,
            ),
            (
                "headroom_kv_blocks_used",
                "gauge",
                "KV cache blocks in use.",
                stats.kv_blocks_used as f64,
            ),
            (
                "headroom_kv_blocks_free",
                "gauge",
                "KV cache blocks free.",
                stats.kv_blocks_free as f64,
            ),
            (
                "headroom_state_slots_used",
                "gauge",
                "State slots (running sequences' GDN state) in use.",
                stats.gdn_slots_used as f64,
            ),
            (
                "headroom_state_slots_free",
                "gauge",
                "State slots free.",
                stats.gdn_slots_free as f64,
            ),
            (
                "headroom_kv_blocks_cached",
                "gauge",
                "Idle KV blocks kept by the prefix cache for their content (counted as free).",
                stats.kv_blocks_cached as f64,
            ),
            (
                "headroom_steps_queued_ahead_total",
                "counter",
                "Engine steps queued while the step before was in flight (the step overlap).",
                stats.steps_queued_ahead as f64,
            ),
            (
                "headroom_step_overlap_enabled",
                "gauge",
                "1 when the engine queues each step before the last one's tokens are read.",
                f64::from(u8::from(stats.step_overlap.on)),
            ),
            (
                "headroom_cuda_graphs_enabled",
                "gauge",
                "1 when decode steps are recorded and launched as CUDA graphs.",
                f64::from(u8::from(stats.cuda_graphs.on)),
            ),
            (
                "headroom_prefix_cache_queried_tokens_total",
                "counter",
                "Prompt tokens looked up in the prefix cache at admission.",
                stats.prefix_cache_queried_tokens as f64,
            ),
            (
                "headroom_prefix_cache_hit_tokens_total",
                "counter",
                "Prompt tokens the prefix cache supplied instead of computing them.",
                stats.prefix_cache_hit_tokens as f64,
            ),
            (
                "headroom_prefix_cache_snapshot_slots_used",
                "gauge",
                "Prefix-cache GDN state snapshot slots holding a snapshot.",
                stats.prefix_snapshot_slots_used as f64,
            ),
            (
                "headroom_prefix_cache_snapshot_slots",
                "gauge",
                "Prefix-cache GDN state snapshot slots made.",
                stats.prefix_snapshot_slots as f64,
            ),
            (
                "headroom_preemptions_total",
                "counter",
                "Running sequences preempted because the KV pool was short (recomputed later).",
                stats.preemptions as f64,
            ),
            (
                "headroom_engine_admitted_total",
                "counter",
                "Requests the engine admitted.",
                stats.admitted as f64,
            ),
            (
                "headroom_admission_refused_total",
                "counter",
                "Requests the engine refused at submit (context, memory, queue).",
                stats.refused as f64,
            ),
            (
                "headroom_engine_finished_total",
                "counter",
                "Requests the engine finished.",
                stats.finished as f64,
            ),
            (
                "headroom_engine_cancelled_total",
                "counter",
                "Requests cancelled in the engine.",
                stats.cancelled as f64,
            ),
            (
                "headroom_prompt_tokens_total",
                "counter",
                "Prompt tokens processed.",
                stats.prompt_tokens as f64,
            ),
            (
                "headroom_generation_tokens_total",
                "counter",
                "Tokens generated.",
                stats.generated_tokens as f64,
            ),
        ];
        for (name, kind, help, v) in gauges {
            write_metric(&mut out, name, kind, help, v);
        }
        render_device_memory(&mut out, &stats.device_memory);
        if let Some(gpu) = &self.gpu {
            gpu.render(&mut out);
        }
        out
    }
}

/// Each rank's backend memory (one rank unless the model is a
/// tensor-parallel group), as of the engine's last step: bytes held now and
/// the most held at once since start-up (the start-up line's plan is what
/// it was sized to).
fn render_device_memory(out: &mut String, ranks: &[RankMemory]) {
    type Field = fn(&RankMemory) -> usize;
    let families: [(&str, &str, Field); 3] = [
        (
            "headroom_device_memory_bytes",
            "Backend memory held now (weights, KV pool, GDN state, transients), per rank.",
            |m| m.active_bytes,
        ),
        (
            "headroom_device_memory_peak_bytes",
            "Most backend memory held at once since start-up, per rank.",
            |m| m.peak_bytes,
        ),
        (
            "headroom_device_memory_reserved_bytes",
            "Device memory the backend has obtained now: held plus what its allocator keeps cached for reuse, per rank.",
            |m| m.reserved_bytes,
        ),
    ];
    for (name, help, field) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (rank, m) in ranks.iter().enumerate() {
            let _ = writeln!(out, "{name}{{rank=\"{rank}\"}} {}", field(m));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counts_labelled() {
        let m = Metrics::default();
        m.ttft(0.003);
        m.ttft(0.2);
        m.ttft(f64::NAN);
        m.request("chat", Outcome::Stop);
        m.request("chat", Outcome::Stop);
        m.http_error(404);
        let text = m.render(&EngineStats {
            kv_blocks_free: 7,
            gdn_slots_used: 3,
            gdn_slots_free: 5,
            preemptions: 11,
            prefix_cache_queried_tokens: 640,
            prefix_cache_hit_tokens: 512,
            prefix_snapshot_slots_used: 2,
            steps_queued_ahead: 9,
            device_memory: vec![
                RankMemory {
                    active_bytes: 1000,
                    peak_bytes: 3000,
                    reserved_bytes: 4000,
                },
                RankMemory {
                    active_bytes: 900,
                    peak_bytes: 2900,
                    reserved_bytes: 3900,
                },
            ],
            cuda_graphs: headroom_engine::GraphsResolution {
                on: true,
                ..Default::default()
            },
            ..EngineStats::default()
        });
        assert!(text.contains("headroom_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n"));
        assert!(text.contains("headroom_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n"));
        assert!(text.contains("headroom_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n"));
        assert!(text.contains("headroom_time_to_first_token_seconds_count 2\n"));
        assert!(text.contains("headroom_requests_total{endpoint=\"chat\",outcome=\"stop\"} 2\n"));
        assert!(text.contains("headroom_http_errors_total{status=\"404\"} 1\n"));
        assert!(text.contains("headroom_kv_blocks_free 7\n"));
        assert!(text.contains("headroom_prefix_cache_queried_tokens_total 640\n"));
        assert!(text.contains("headroom_prefix_cache_hit_tokens_total 512\n"));
        assert!(text.contains("headroom_prefix_cache_snapshot_slots_used 2\n"));
        assert!(text.contains("headroom_state_slots_used 3\n"));
        assert!(text.contains("headroom_steps_queued_ahead_total 9\n"));
        for line in [
            "# TYPE headroom_device_memory_bytes gauge\n",
            "headroom_device_memory_bytes{rank=\"0\"} 1000\n",
            "headroom_device_memory_bytes{rank=\"1\"} 900\n",
            "headroom_device_memory_peak_bytes{rank=\"0\"} 3000\n",
            "headroom_device_memory_peak_bytes{rank=\"1\"} 2900\n",
            "headroom_device_memory_reserved_bytes{rank=\"0\"} 4000\n",
            "headroom_device_memory_reserved_bytes{rank=\"1\"} 3900\n",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
        assert!(text.contains("headroom_cuda_graphs_enabled 1\n"));
        assert!(text.contains("headroom_step_overlap_enabled 0\n"));
        assert!(text.contains("headroom_state_slots_free 5\n"));
        assert!(text.contains(
            "# TYPE headroom_preemptions_total counter\nheadroom_preemptions_total 11\n"
        ));
    }

    /// Every metric the exposition has is in the table of `docs/server.md`
    /// (an operator's list of what to scrape).
    #[test]
    fn every_metric_is_documented() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/server.md"),
        )
        .expect("docs/server.md");
        let from = doc
            .find("## Metrics (`GET /metrics`)")
            .expect("the metrics section");
        let section = &doc[from + 3..];
        let table = &section[..section.find("\n## ").unwrap_or(section.len())];
        // With a GPU reader, so its lines are checked too.
        let mut metrics = Metrics::default();
        metrics.set_gpu(GpuMetrics::new(Box::new(|| {
            Ok(crate::gpu_metrics::GpuReading {
                sample: headroom_hardware::ClockSample {
                    sm_mhz: 1980,
                    power_mw: 100_000,
                    reasons: 0,
                    energy_mj: Some(1),
                },
                power_limit_mw: 700_000,
            })
        })));
        let text = metrics.render(&EngineStats::default());
        assert!(text.contains("headroom_gpu_energy_joules_total"), "{text}");
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert!(names.len() > 20, "{names:?}");
        let missing: Vec<&&str> = names
            .iter()
            .filter(|n| !table.contains(&format!("`{n}")))
            .collect();
        assert!(missing.is_empty(), "not in docs/server.md: {missing:?}");
    }
}
