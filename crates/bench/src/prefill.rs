//! The prefill bench runner, `headroom.bench.prefill/1`.
//!
//! Each arm is an attention *setting* (`fallback:N`, `fallback`, `fused`,
//! `auto`): the runner turns it into [`Controls`] (source `cli`), resolves
//! every layer through the policy's [`resolve`], and prefills a prompt of
//! each length through a [`PrefillTarget`]: the engine's scheduler
//! ([`crate::prefill_engine`], `path = "engine"`, what `headroom bench
//! prefill` and `qualify` run) or the model's own one-pass prefill
//! ([`crate::prefill_model`], `path = "model.prefill"`). The route and query
//! block in every sample are read back from the attention reports of the run
//! ([`crate::prefill_target::AttentionRun`], grouped by [`crate::prefill_reports`]), never copied
//! from the request; a run whose calls disagree with each other fails. Arms
//! run round-robin per iteration so drift on a shared machine hits every arm
//! alike.

use crate::attention::median;
use crate::build_info::BuildInfo;
use crate::prefill_reports::layer_routes_from_reports;
use crate::prefill_schema::*;
use crate::prefill_target::{PrefillRun, PrefillTarget};
use crate::run_counter::RunCounter;
use anyhow::{ensure, Context};
use headroom_core::{LayerKind, RouteRequest};
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{
    resolve, AttentionControl, ControlSource, Controls, QueryBlockControl, Registry,
    ResolvedAttention,
};
use std::fmt;

/// One arm: a control and an optional query-block override.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm {
    pub control: AttentionControl,
    pub query_block: Option<usize>,
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.control.as_str())?;
        if let Some(q) = self.query_block {
            write!(f, ":{q}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Arm {
    type Err = String;
    /// `fallback`, `fallback:N`, `fused`, `auto`, `auto:N` (N = query block, 0 = one block).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (c, q) = match s.split_once(':') {
            Some((c, q)) => (c, Some(q)),
            None => (s, None),
        };
        let control = AttentionControl::parse(c)
            .ok_or_else(|| format!("unknown arm control `{c}` (fallback, fused, auto)"))?;
        let query_block = match q {
            None => None,
            Some(q) => Some(
                q.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("bad query block `{q}` in arm `{s}`"))?,
            ),
        };
        if control == AttentionControl::Fused && query_block.is_some() {
            return Err(format!("arm `{s}`: the fused route has no query block"));
        }
        Ok(Arm {
            control,
            query_block,
        })
    }
}

impl Arm {
    /// The controls this arm sets, as if given on the command line.
    pub fn controls(&self) -> Controls {
        Controls {
            execution: self.control,
            execution_source: ControlSource::Cli,
            query_block: match self.query_block {
                Some(value) => QueryBlockControl::Set {
                    value,
                    source: ControlSource::Cli,
                },
                None => QueryBlockControl::Unset,
            },
        }
    }
}

/// One `bench prefill` invocation.
#[derive(Debug, Clone)]
pub struct PrefillConfig {
    pub arms: Vec<Arm>,
    pub lengths: Vec<usize>,
    pub warmup: usize,
    pub iterations: usize,
    pub seed: u64,
    pub model_source: String,
}

/// The resolved plan of one arm: per-layer resolution and the route requests.
struct Plan {
    resolved: Vec<ResolvedAttention>,
    routes: Vec<(usize, RouteRequest)>,
}

fn plan(arm: &Arm, fp: &HardwareFingerprint, kinds: &[LayerKind], reg: &Registry) -> Plan {
    let controls = arm.controls();
    let resolved: Vec<ResolvedAttention> = kinds
        .iter()
        .map(|k| resolve(fp, k, &controls, reg))
        .collect();
    let routes = resolved
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.route_request().map(|q| (i, q)))
        .collect();
    Plan { resolved, routes }
}

/// Deterministic prompt ids in `[0, vocab)`.
pub fn prompt(length: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    (0..length)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab.max(1) as u64) as u32
        })
        .collect()
}

/// Runs every (length, arm) and returns the evidence.
pub fn run(
    cfg: &PrefillConfig,
    target: &mut dyn PrefillTarget,
    hardware: HardwareFingerprint,
    registry: &Registry,
) -> anyhow::Result<PrefillBenchFile> {
    ensure!(!cfg.arms.is_empty(), "no --arms given");
    ensure!(!cfg.lengths.is_empty(), "no --lengths given");
    ensure!(cfg.iterations >= 1, "--iterations must be >= 1");
    ensure!(
        cfg.lengths.iter().all(|&l| l >= 1),
        "every length must be >= 1"
    );
    let kinds = target.layer_kinds();
    let plans: Vec<Plan> = cfg
        .arms
        .iter()
        .map(|a| plan(a, &hardware, &kinds, registry))
        .collect();
    let total = (cfg.warmup + cfg.iterations) * cfg.arms.len() * cfg.lengths.len();
    let mut bar = RunCounter::new("bench prefill", total, "prefills", "prefill bench");
    let mut samples = Vec::new();
    for (li, &length) in cfg.lengths.iter().enumerate() {
        let ids = prompt(
            length,
            target.vocab_size(),
            cfg.seed.wrapping_add(li as u64),
        );
        let msg = format!("prefill, length {length}");
        for _ in 0..cfg.warmup {
            for p in &plans {
                target.prefill(&ids, &p.routes)?;
                bar.inc(&msg);
            }
        }
        let mut runs: Vec<Vec<PrefillRun>> = plans.iter().map(|_| Vec::new()).collect();
        for _ in 0..cfg.iterations {
            for (p, r) in plans.iter().zip(runs.iter_mut()) {
                reset_process_peak();
                let mut run = target.prefill(&ids, &p.routes)?;
                ensure!(
                    run.ttft_ms.is_finite() && run.ttft_ms > 0.0,
                    "TTFT {} ms at length {length}",
                    run.ttft_ms
                );
                run.backend_peak_bytes = run.backend_peak_bytes.max(run.backend_before_bytes);
                run.process_peak_rss_bytes = process_peak_rss();
                r.push(run);
                bar.inc(&msg);
            }
        }
        for ((arm, p), r) in cfg.arms.iter().zip(&plans).zip(&runs) {
            let sched = target.scheduler();
            let kv = target.kv();
            samples.push(
                sample(arm, length, &kinds, p, r, sched, kv)
                    .with_context(|| format!("arm {arm} at length {length}"))?,
            );
        }
    }
    bar.finish("prefill bench done");
    Ok(PrefillBenchFile {
        schema: PREFILL_SCHEMA.to_string(),
        build: BuildInfo::current(target.backend(), &hardware),
        hardware,
        model: ModelInfo {
            source: cfg.model_source.clone(),
            num_layers: kinds.len(),
            vocab_size: target.vocab_size(),
        },
        path: target.path().to_string(),
        lengths: cfg.lengths.clone(),
        warmup: cfg.warmup,
        iterations: cfg.iterations,
        samples,
    })
}

fn sample(
    arm: &Arm,
    length: usize,
    kinds: &[LayerKind],
    p: &Plan,
    runs: &[PrefillRun],
    mut scheduler: SchedulerRecord,
    kv: KvRecord,
) -> anyhow::Result<PrefillSample> {
    let attention = layer_routes_from_reports(kinds, &p.resolved, runs)?;
    let steps = runs.first().map_or(0, |r| r.steps);
    ensure!(
        runs.iter().all(|r| r.steps == steps),
        "the runs took different numbers of steps to the first token: {:?}",
        runs.iter().map(|r| r.steps).collect::<Vec<_>>()
    );
    scheduler.steps_to_first_token = steps;
    let times: Vec<f64> = runs.iter().map(|r| r.ttft_ms).collect();
    let med = median(&mut times.clone());
    let transient = attention
        .iter()
        .map(|g| g.reported.transient_peak_bytes)
        .max()
        .unwrap_or(0);
    Ok(PrefillSample {
        arm: arm.to_string(),
        length,
        control: ControlRecord {
            requested: arm.control,
            requested_source: ControlSource::Cli,
            query_block_override: arm.query_block,
        },
        attention,
        ttft_ms: Timing {
            median: med,
            min: times.iter().copied().fold(f64::INFINITY, f64::min),
            max: times.iter().copied().fold(0.0, f64::max),
            runs: times,
        },
        prefill_tokens_per_s: length as f64 / (med * 1e-3),
        memory: MemoryRecord {
            attention_transient_peak_bytes: transient,
            backend_before_bytes: runs
                .iter()
                .map(|r| r.backend_before_bytes)
                .max()
                .unwrap_or(0),
            backend_peak_bytes: runs.iter().map(|r| r.backend_peak_bytes).max().unwrap_or(0),
            process_peak_rss_bytes: runs
                .iter()
                .map(|r| r.process_peak_rss_bytes)
                .max()
                .unwrap_or(0),
        },
        kv,
        scheduler,
    })
}

/// Resets the kernel's peak-RSS mark (`/proc/self/clear_refs` 5); best effort.
fn reset_process_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// `VmHWM` of this process in bytes; 0 where unreadable.
pub fn process_peak_rss() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(0, |k| k.saturating_mul(1024))
}
