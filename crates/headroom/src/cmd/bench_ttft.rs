//! `headroom bench ttft`: time-to-first-token of one prompt through the
//! engine (`path = "engine"`: the scheduler `generate` and `serve` run, its
//! solo stripe as resolved — by default the whole prompt in one step on
//! cuda, 2,048 tokens on cpu), fresh request per run; the peak backend
//! memory the prefill added, the attention route each full-attention layer
//! reported, decode tokens/s after the prompt (decode steps through the
//! engine), and optionally a per-part time breakdown (`--breakdown`, one
//! extra profiled request: see `headroom_model::profile`); on one CUDA device
//! with NVML, the SM clock and power over the measured runs (a power-capped
//! card runs below its boost clock, so a time is read with its clock). The
//! loop is
//! [`driver`], shared with `--tensor-parallel` ([`tp`]). Writes
//! the `headroom.bench.ttft/2` JSON with `--json`.

mod driver;
mod tp;

use crate::attention_setup::attention_plan;
use crate::backend_select::{
    load_config, run_on_backend, BackendSettings, LoadInfo, ModelJob, WeightsInit,
};
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use anyhow::{bail, Context};
use driver::scheduler_settings;
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_engine::{EngineCore, SoloStripe};
use headroom_model::profile::PartTime;
use headroom_model::{AttentionPlan, Qwen35Model};
use serde::Serialize;
use std::path::PathBuf;

pub(crate) use driver::{measure, BenchModel, EngineRecord, GpuClock, LengthRun};

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
    /// Prefill chunk in tokens: the engine's prefill chunk and solo stripe
    /// (default: the engine's defaults, a solo stripe of `auto`: the whole
    /// prompt in one step on cuda up to 65,536 tokens and the memory left,
    /// 2048 on cpu).
    #[arg(long)]
    pub chunk: Option<usize>,
    /// The solo stripe alone: tokens per step of the (lone) request, or `auto`.
    #[arg(long, value_name = "N|auto")]
    pub solo_stripe: Option<SoloStripe>,
    /// Measured runs per length (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub iterations: usize,
    /// Unmeasured runs per length first.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Greedy decode steps after one prompt per length, through the engine
    /// (decode tokens/s; 0 = none; at most 65,536).
    #[arg(long, default_value_t = 0)]
    pub decode: usize,
    /// One extra profiled run per length: time per part of the forward
    /// (and, with --decode, of a few profiled decode steps, per token).
    #[arg(long)]
    pub breakdown: bool,
    /// Each measured run's time per part too, from device events between
    /// the parts (no synchronisation: the runs stay the measured ones; the
    /// parts sum to about the run's TTFT). For runs that differ: which part.
    #[arg(long)]
    pub breakdown_each: bool,
    /// Batch-invariant arithmetic (as `serve --batch-invariant`), to measure
    /// what it costs.
    #[arg(long)]
    pub batch_invariant: bool,
    /// The engine's step overlap (as `serve --step-overlap`): each decode
    /// step queued before the last one's token is read.
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    pub step_overlap: headroom_engine::StepOverlap,
    /// Decode steps as CUDA graphs (as `serve --cuda-graphs`).
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    pub cuda_graphs: headroom_engine::CudaGraphs,
    /// Write the headroom.bench.ttft/2 JSON here (headroom.bench.ttft.tp/2 with --tensor-parallel).
    #[arg(long, value_name = "OUT")]
    pub json: Option<PathBuf>,
    #[command(flatten)]
    pub tp: crate::tp::TpArgs,
}

/// Most tokens one prompt may have here (bounds every allocation from `--lengths`).
const MAX_LENGTH: usize = 1 << 20;

/// Most `--decode` steps.
const MAX_DECODE: usize = 1 << 16;

#[derive(Debug, Serialize)]
struct LengthResult {
    tokens: usize,
    ttft_ms: Vec<f64>,
    median_ttft_ms: f64,
    tokens_per_s: f64,
    /// Peak backend bytes the prefill added over the loaded model and the engine's state.
    peak_transient_bytes: usize,
    attention: String,
    /// Engine steps (forwards) from submission to the first token.
    steps_to_first_token: usize,
    decode_tokens_per_s: Option<f64>,
    breakdown: Vec<PartTime>,
    /// Per part of profiled decode steps, totals over `decode_profiled_steps`
    /// (each part synchronised before and after: host launch time included).
    decode_breakdown: Vec<PartTime>,
    decode_profiled_steps: usize,
    /// With --breakdown-each: each measured run's parts (rank 0), device
    /// time between events.
    run_breakdowns: Vec<Vec<PartTime>>,
    /// The SM clock, power and energy over the measured runs (NVML, sampled
    /// every 10 ms); `null` on the CPU or without NVML.
    clock: Option<headroom_hardware::ClockStats>,
    /// The clock window's energy over the measured runs, per run (the
    /// host's moments between runs included); `null` without an energy
    /// counter. Under a power cap, a change's saving shows here too.
    joules_per_run: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    /// `engine`: each prompt ran as a request through the engine's scheduler.
    path: &'static str,
    backend: String,
    model: String,
    load_seconds: f64,
    weight_bytes: usize,
    chunk: Option<usize>,
    /// `--batch-invariant`: the arithmetic every row gets whatever its step holds.
    batch_invariant: bool,
    /// The engine as run: scheduler settings, the solo stripe resolved and why.
    engine: EngineRecord,
    results: Vec<LengthResult>,
}

pub fn run(a: TtftArgs, g: &GlobalArgs) -> anyhow::Result<()> {
    if let Some(path) = &a.json {
        crate::output::check_output_path("--json", path, &[])?;
    }
    if a.lengths.is_empty() || a.lengths.iter().any(|&l| l == 0 || l > MAX_LENGTH) {
        bail!("--lengths must be between 1 and {MAX_LENGTH} tokens each");
    }
    if a.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    if a.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    if a.decode > MAX_DECODE {
        bail!("--decode must be at most {MAX_DECODE}");
    }
    let scheduler = scheduler_settings(&a)?;
    let cfg = load_config(&a.source)?;
    let model_name = a
        .source
        .synthetic
        .clone()
        .or_else(|| a.source.model.as_ref().map(|d| d.display().to_string()))
        .unwrap_or_default();
    if a.tp.active() {
        let (_, plan) = crate::tp::plan_and_routes(g, a.backend, &cfg, a.tp.world())?;
        let job = tp::TtftJob {
            args: &a,
            plan,
            model_name,
            scheduler,
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
        scheduler,
    };
    run_on_backend(
        a.backend,
        BackendSettings {
            batch_invariant: a.batch_invariant,
        },
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
    scheduler: headroom_engine::SchedulerSettings,
}

/// Deterministic pseudo-random prompt ids in the vocabulary.
pub(crate) fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| (headroom_core::ops::rng::bits(0x7474_6674, i) % vocab as u64) as u32)
        .collect()
}

/// Builds the bench's engine over `model` and prints how its solo stripe resolved.
pub(crate) fn build_engine<B: Backend, M: BenchModel<B>>(
    model: M,
    a: &TtftArgs,
    plan: AttentionPlan,
    scheduler: headroom_engine::SchedulerSettings,
) -> anyhow::Result<EngineCore<B, M>> {
    let core = EngineCore::new(model, driver::engine_config(a, plan, scheduler))
        .context("building the engine")?;
    let st = core.stats();
    println!(
        "engine: {}; solo stripe {} ({}: {}); {}; {}",
        st.settings,
        st.solo_stripe.tokens,
        st.solo_stripe.requested,
        st.solo_stripe.reason,
        core.step_overlap(),
        core.cuda_graphs()
    );
    Ok(core)
}

/// Prints one part table.
pub(crate) fn print_parts(indent: &str, parts: &[PartTime]) {
    for p in parts {
        println!(
            "{indent}{:<24} {:>9.2} ms  ({} calls)",
            crate::describe::part(&p.part),
            p.seconds * 1e3,
            p.calls
        );
    }
}

impl ModelJob for TtftJob<'_> {
    type Output = ();

    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<()> {
        let a = self.args;
        let mut core = build_engine(model, a, self.plan, self.scheduler)?;
        let clock = match info.backend {
            BackendKind::Cuda => GpuClock::open()
                .map_err(|reason| eprintln!("no clock or power sampling: {reason}"))
                .ok(),
            BackendKind::Cpu => None,
        };
        let mut results = Vec::new();
        for &n in &a.lengths {
            let r: LengthRun = measure(&mut core, a, n, clock.as_ref())?;
            let before = r.before_bytes_per_rank.first().copied().unwrap_or(0);
            let peak = r
                .peak_bytes_per_rank
                .first()
                .copied()
                .unwrap_or(0)
                .saturating_sub(before);
            let decode_tps = r.decode.as_ref().map(|d| d.0);
            println!(
                "{:>7} tokens  TTFT {:>9.1} ms  {:>8.0} tok/s  peak +{:.2} GiB  {} steps  {}{}",
                n,
                r.median_ttft_ms,
                n as f64 / r.median_ttft_ms * 1e3,
                crate::describe::gib(peak as u64),
                r.steps_to_first_token,
                r.attention,
                decode_tps
                    .map(|t| format!("  decode {t:.1} tok/s"))
                    .unwrap_or_default()
            );
            let joules_per_run = r
                .clock
                .as_ref()
                .and_then(|c| c.energy_j)
                .map(|j| j / a.iterations as f64);
            if let Some(c) = &r.clock {
                println!(
                    "      clock over the measured runs: {}{}",
                    c.summary(),
                    joules_per_run
                        .map(|j| format!(" ({j:.1} J a run)"))
                        .unwrap_or_default()
                );
            }
            let breakdown = r.breakdown.into_iter().next().unwrap_or_default();
            print_parts("      ", &breakdown);
            let decode_breakdown = r.decode_breakdown.into_iter().next().unwrap_or_default();
            let steps = r.decode_profiled_steps;
            if steps > 0 {
                let total: f64 = decode_breakdown.iter().map(|p| p.seconds).sum();
                println!(
                    "      decode per token (profiled, {steps} steps): {:.3} ms in parts",
                    total * 1e3 / steps as f64
                );
                for p in &decode_breakdown {
                    println!(
                        "      decode {:<22} {:>9.3} ms/token  ({} calls/token)",
                        crate::describe::part(&p.part),
                        p.seconds * 1e3 / steps as f64,
                        p.calls / steps as u64
                    );
                }
            }
            results.push(LengthResult {
                tokens: n,
                tokens_per_s: n as f64 / r.median_ttft_ms * 1e3,
                ttft_ms: r.ttft_ms,
                median_ttft_ms: r.median_ttft_ms,
                peak_transient_bytes: peak,
                attention: r.attention,
                steps_to_first_token: r.steps_to_first_token,
                decode_tokens_per_s: decode_tps,
                breakdown,
                decode_breakdown,
                decode_profiled_steps: steps,
                run_breakdowns: r
                    .run_breakdowns
                    .into_iter()
                    .map(|ranks| ranks.into_iter().next().unwrap_or_default())
                    .collect(),
                clock: r.clock,
                joules_per_run,
            });
        }
        let report = Report {
            schema: "headroom.bench.ttft/2",
            path: "engine",
            backend: info.backend.to_string(),
            model: self.model_name,
            load_seconds: info.load_seconds,
            weight_bytes: info.weight_bytes,
            chunk: a.chunk,
            batch_invariant: a.batch_invariant,
            engine: EngineRecord::of(&core),
            results,
        };
        println!(
            "load {:.1} s, weights {} on {}",
            report.load_seconds,
            crate::describe::size(report.weight_bytes as u64),
            report.backend
        );
        if let Some(path) = &a.json {
            let text = serde_json::to_string_pretty(&report)? + "\n";
            crate::output::write_file_atomically(path, text.as_bytes())?;
        }
        Ok(())
    }
}
