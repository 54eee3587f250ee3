//! `headroom bench ttft`: time-to-first-token of one prompt through the
//! model's prefill on a backend (fresh session per run, logits of the last
//! row back on the host), the peak backend memory the prefill added, the
//! attention route each full-attention layer reported, decode tokens/s after
//! the prompt, and optionally a per-part time breakdown (`--breakdown`, one
//! extra profiled run: see `headroom_model::profile`). Writes the
//! `headroom.bench.ttft/1` JSON with `--json`.

use crate::backend_select::{load_config, run_on_backend, LoadInfo, ModelJob, WeightsInit};
use crate::cmd::logits::{attention_plan, routes_that_ran};
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_model::profile::PartTime;
use headroom_model::{AttentionPlan, ForwardOptions, LogitsRows, Qwen35Model};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct TtftArgs {
    #[command(flatten)]
    pub source: ModelSource,
    /// Compute backend: cpu | cuda.
    #[arg(long, default_value = "cpu")]
    pub backend: BackendKind,
    /// Seed of a synthetic model's weights.
    #[arg(long, default_value_t = 0)]
    pub weights_seed: u64,
    /// Where a synthetic model's weights are drawn (default: host on cpu, device on cuda).
    #[arg(long, value_enum)]
    pub weights_init: Option<WeightsInit>,
    /// Prompt lengths in tokens (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2048,8192,32768")]
    pub lengths: Vec<usize>,
    /// Prefill chunk in tokens (default: the whole prompt in one pass).
    #[arg(long)]
    pub chunk: Option<usize>,
    /// Measured runs per length (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Unmeasured runs per length first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Greedy decode steps after one prompt per length (decode tokens/s; 0 = none).
    #[arg(long, default_value_t = 0)]
    pub decode: usize,
    /// One extra profiled run per length: time per part of the forward
    /// (and, with --decode, of a few profiled decode steps, per token).
    #[arg(long)]
    pub breakdown: bool,
    /// Write the headroom.bench.ttft/1 JSON here (headroom.bench.ttft.tp/1 with --tensor-parallel).
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub tp: crate::tp::TpArgs,
}

/// Most tokens one prompt may have here (bounds every allocation from `--lengths`).
const MAX_LENGTH: usize = 1 << 20;

#[derive(Debug, Serialize)]
struct LengthResult {
    tokens: usize,
    ttft_ms: Vec<f64>,
    median_ttft_ms: f64,
    tokens_per_s: f64,
    /// Peak backend bytes the prefill added over the loaded model.
    peak_transient_bytes: usize,
    attention: String,
    decode_tokens_per_s: Option<f64>,
    /// Of the decode wall time: the host's share spent copying the logits
    /// row back and taking its argmax, per token.
    decode_host_argmax_ms: Option<f64>,
    breakdown: Vec<PartTime>,
    /// Per part of profiled decode steps, totals over `decode_profiled_steps`
    /// (each part synchronised before and after: host launch time included).
    decode_breakdown: Vec<PartTime>,
    decode_profiled_steps: usize,
}

/// Unmeasured decode steps before the timed ones.
const DECODE_WARMUP_STEPS: usize = 2;

/// Decode steps profiled per length with --breakdown.
const PROFILED_DECODE_STEPS: usize = 8;

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    backend: String,
    model: String,
    load_seconds: f64,
    weight_bytes: usize,
    chunk: Option<usize>,
    results: Vec<LengthResult>,
}

pub fn run(a: TtftArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    if a.lengths.is_empty() || a.lengths.iter().any(|&l| l == 0 || l > MAX_LENGTH) {
        bail!("--lengths must be between 1 and {MAX_LENGTH} tokens each");
    }
    if a.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    if a.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    let cfg = load_config(&a.source)?;
    let model_name = a
        .source
        .synthetic
        .clone()
        .or_else(|| a.source.model.as_ref().map(|d| d.display().to_string()))
        .unwrap_or_default();
    if a.tp.active() {
        let (_, plan) = crate::tp::plan_and_routes(g, a.backend, &cfg, a.tp.world())?;
        let job = crate::tp_bench::TtftJob {
            args: &a,
            plan,
            model_name,
        };
        return crate::tp::run_on_group(
            a.backend,
            a.tp.world(),
            &a.source,
            &cfg,
            a.weights_seed,
            a.weights_init,
            job,
        );
    }
    let plan = attention_plan(g, a.backend, &cfg)?;
    let job = TtftJob {
        args: &a,
        plan,
        model_name,
    };
    run_on_backend(
        a.backend,
        &a.source,
        &cfg,
        a.weights_seed,
        a.weights_init,
        job,
    )
}

struct TtftJob<'a> {
    args: &'a TtftArgs,
    plan: AttentionPlan,
    model_name: String,
}

/// Deterministic pseudo-random prompt ids in the vocabulary.
fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| (headroom_core::ops::rng::bits(0x7474_6674, i) % vocab as u64) as u32)
        .collect()
}

impl ModelJob for TtftJob<'_> {
    type Output = ();

    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<()> {
        let a = self.args;
        let be = model.backend();
        let opts = ForwardOptions {
            attention: self.plan.clone(),
            chunk: a.chunk,
            logits: LogitsRows::Last,
        };
        let mut results = Vec::new();
        for &n in &a.lengths {
            let ids = prompt(n, model.vocab_size());
            let capacity = n + a.decode + DECODE_WARMUP_STEPS + 1;
            let mut times = Vec::new();
            let mut peak = 0usize;
            let mut attention = String::new();
            for it in 0..a.warmup + a.iterations {
                let mut s = model.new_session_with_capacity(capacity)?;
                be.synchronize().context("sync")?;
                let before = be.memory().0;
                be.reset_peak_memory();
                let started = Instant::now();
                let out = model.prefill(&mut s, &ids, &opts).context("prefill")?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if out.logits.iter().any(|v| !v.is_finite()) {
                    bail!("non-finite logits at {n} tokens");
                }
                if it >= a.warmup {
                    times.push(ms);
                    peak = peak.max(be.memory().1.saturating_sub(before));
                    attention = routes_that_ran(&out.attention);
                }
                eprintln!("  {n} tokens, run {it}: {ms:.1} ms");
            }
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let decode = if a.decode > 0 {
                Some(decode_rate(&model, &ids, a.decode, capacity, &self.plan)?)
            } else {
                None
            };
            let decode_tps = decode.map(|d| d.tokens_per_s);
            let (decode_breakdown, decode_profiled_steps) = if a.breakdown && a.decode > 0 {
                let steps = PROFILED_DECODE_STEPS.min(a.decode);
                (
                    decode_profile(&model, &ids, steps, capacity, &self.plan)?,
                    steps,
                )
            } else {
                (Vec::new(), 0)
            };
            let breakdown = if a.breakdown {
                model.set_profiling(true);
                let mut s = model.new_session_with_capacity(capacity)?;
                model
                    .prefill(&mut s, &ids, &opts)
                    .context("profiled prefill")?;
                model.set_profiling(false);
                model.take_profile()
            } else {
                Vec::new()
            };
            println!(
                "{:>7} tokens  TTFT {:>9.1} ms  {:>8.0} tok/s  peak +{:.2} GiB  {}{}",
                n,
                median,
                n as f64 / median * 1e3,
                peak as f64 / (1u64 << 30) as f64,
                attention,
                decode_tps
                    .map(|t| format!("  decode {t:.1} tok/s"))
                    .unwrap_or_default()
            );
            for p in &breakdown {
                println!(
                    "      {:<24} {:>9.2} ms  ({} calls)",
                    format!("{:?}", p.part),
                    p.seconds * 1e3,
                    p.calls
                );
            }
            if let Some(d) = decode {
                println!(
                    "      decode {:.3} ms/token, of which logits copy + host argmax {:.3} ms",
                    1e3 / d.tokens_per_s,
                    d.host_argmax_ms
                );
            }
            if decode_profiled_steps > 0 {
                let total: f64 = decode_breakdown.iter().map(|p| p.seconds).sum();
                println!(
                    "      decode per token (profiled, {decode_profiled_steps} steps): {:.3} ms in parts",
                    total * 1e3 / decode_profiled_steps as f64
                );
                for p in &decode_breakdown {
                    println!(
                        "      decode {:<17} {:>9.3} ms/token  ({} calls/token)",
                        format!("{:?}", p.part),
                        p.seconds * 1e3 / decode_profiled_steps as f64,
                        p.calls / decode_profiled_steps as u64
                    );
                }
            }
            results.push(LengthResult {
                tokens: n,
                ttft_ms: times,
                median_ttft_ms: median,
                tokens_per_s: n as f64 / median * 1e3,
                peak_transient_bytes: peak,
                attention,
                decode_tokens_per_s: decode_tps,
                decode_host_argmax_ms: decode.map(|d| d.host_argmax_ms),
                breakdown,
                decode_breakdown,
                decode_profiled_steps,
            });
        }
        let report = Report {
            schema: "headroom.bench.ttft/1",
            backend: info.backend.to_string(),
            model: self.model_name,
            load_seconds: info.load_seconds,
            weight_bytes: info.weight_bytes,
            chunk: a.chunk,
            results,
        };
        println!(
            "load {:.1} s, weights {:.2} GiB on {}",
            report.load_seconds,
            report.weight_bytes as f64 / (1u64 << 30) as f64,
            report.backend
        );
        if let Some(path) = &a.json {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// What [`decode_rate`] measured.
#[derive(Debug, Clone, Copy)]
struct DecodeRate {
    tokens_per_s: f64,
    /// Host argmax per token (the logits row's copy is inside the step).
    host_argmax_ms: f64,
}

/// The greedy next token of a logits row (lowest index on ties).
fn argmax(logits: &[f32]) -> u32 {
    logits
        .iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |b, (i, &v)| {
            if v > b.1 {
                (i, v)
            } else {
                b
            }
        })
        .0 as u32
}

fn decode_options(plan: &AttentionPlan) -> ForwardOptions {
    ForwardOptions {
        attention: plan.clone(),
        chunk: None,
        logits: LogitsRows::Last,
    }
}

/// Greedy decode tokens/s after prefilling `ids`.
fn decode_rate<B: Backend>(
    model: &Qwen35Model<B>,
    ids: &[u32],
    steps: usize,
    capacity: usize,
    plan: &AttentionPlan,
) -> anyhow::Result<DecodeRate> {
    let mut s = model.new_session_with_capacity(capacity)?;
    let opts = decode_options(plan);
    let mut logits = model.prefill(&mut s, ids, &opts)?.logits;
    // Unmeasured steps first: a kernel's first use compiles or loads it.
    for _ in 0..DECODE_WARMUP_STEPS {
        logits = model.prefill(&mut s, &[argmax(&logits)], &opts)?.logits;
    }
    let mut argmax_s = 0.0;
    let started = Instant::now();
    for _ in 0..steps {
        let t = Instant::now();
        let next = argmax(&logits);
        argmax_s += t.elapsed().as_secs_f64();
        logits = model.prefill(&mut s, &[next], &opts)?.logits;
    }
    Ok(DecodeRate {
        tokens_per_s: steps as f64 / started.elapsed().as_secs_f64(),
        host_argmax_ms: argmax_s * 1e3 / steps.max(1) as f64,
    })
}

/// Per-part totals of `steps` profiled greedy decode steps after `ids`.
fn decode_profile<B: Backend>(
    model: &Qwen35Model<B>,
    ids: &[u32],
    steps: usize,
    capacity: usize,
    plan: &AttentionPlan,
) -> anyhow::Result<Vec<PartTime>> {
    let mut s = model.new_session_with_capacity(capacity)?;
    let opts = decode_options(plan);
    let mut logits = model.prefill(&mut s, ids, &opts)?.logits;
    model.take_profile();
    model.set_profiling(true);
    let run = (0..steps).try_for_each(|_| {
        logits = model.prefill(&mut s, &[argmax(&logits)], &opts)?.logits;
        anyhow::Ok(())
    });
    model.set_profiling(false);
    run?;
    Ok(model.take_profile())
}
