//! The measurement loop of `bench ttft`, through the engine (the path
//! `generate` and `serve` run) over one model or a tensor-parallel group
//! ([`BenchModel`]): per prompt length, fresh greedy requests of one token
//! submitted to an [`EngineCore`] and stepped until they finish — TTFT is
//! the engine's own measure (submission to the first drawn token), the
//! routes come back from the attention reports of the calls that ran, the
//! peak is each rank's backend peak over the measured runs. Decode tokens/s
//! come from one longer request (decode steps through the engine); the
//! breakdowns from one profiled request, the model's profile hook switched
//! on around the prefill steps or the decode steps; with --breakdown-each,
//! each measured run's parts besides, timed by device events between the
//! parts (nothing waited for: the run is the measured one). With a
//! [`GpuClock`] (one CUDA device with NVML) the SM clock and power are
//! sampled on a side thread over the measured runs ([`ClockStats`]).

use super::{prompt, TtftArgs};
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_engine::{
    AttentionRun, EngineConfig, EngineCore, GenerateRequest, KvBackendKind, SchedulerSettings,
    SoloStripeResolution, StreamEvent, Usage,
};
use headroom_hardware::{ClockSampler, ClockStats, Nvml};
use headroom_model::profile::{PartTime, ProfileMode};
use headroom_model::{AttentionPlan, Qwen35Model, StepModel, TpGroup};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// NVML on the bench's device.
#[derive(Clone)]
pub struct GpuClock {
    nvml: Arc<Nvml>,
}

impl GpuClock {
    /// NVML on CUDA device 0, or why not.
    pub fn open() -> Result<GpuClock, String> {
        Ok(GpuClock {
            nvml: Arc::new(Nvml::for_cuda_device0()?),
        })
    }

    /// The power limit the device enforces (0 when NVML will not tell).
    fn power_limit_mw(&self) -> u32 {
        self.nvml.power_limit_mw().unwrap_or(0)
    }

    fn start(&self) -> ClockSampler {
        let nvml = Arc::clone(&self.nvml);
        ClockSampler::start(
            move || nvml.sample(),
            headroom_hardware::gpu_clock::DEFAULT_PERIOD,
        )
    }
}

/// Unmeasured decode steps before the timed ones.
pub const DECODE_WARMUP_STEPS: usize = 2;

/// Decode steps profiled per length with --breakdown.
pub const PROFILED_DECODE_STEPS: usize = 8;

/// A model the bench drives through the engine: the hooks beyond stepping.
pub trait BenchModel<B: Backend>: StepModel<B> {
    fn synchronize(&self) -> anyhow::Result<()>;
    fn set_profile_mode(&self, mode: ProfileMode);
    /// Each rank's part times since the last call (and clears them).
    fn take_profile(&self) -> Vec<Vec<PartTime>>;
}

impl<B: Backend> BenchModel<B> for Qwen35Model<B>
where
    Qwen35Model<B>: StepModel<B>,
{
    fn synchronize(&self) -> anyhow::Result<()> {
        self.backend().synchronize().context("synchronize")
    }
    fn set_profile_mode(&self, mode: ProfileMode) {
        Qwen35Model::set_profile_mode(self, mode)
    }
    fn take_profile(&self) -> Vec<Vec<PartTime>> {
        vec![Qwen35Model::take_profile(self)]
    }
}

impl<B: Backend> BenchModel<B> for TpGroup<B>
where
    TpGroup<B>: StepModel<B>,
{
    fn synchronize(&self) -> anyhow::Result<()> {
        TpGroup::synchronize(self).context("synchronize")
    }
    fn set_profile_mode(&self, mode: ProfileMode) {
        TpGroup::set_profile_mode(self, mode)
    }
    fn take_profile(&self) -> Vec<Vec<PartTime>> {
        TpGroup::take_profile(self)
    }
}

/// The engine's scheduler as the bench ran it (`path = "engine"`).
#[derive(Debug, Clone, Serialize)]
pub struct EngineRecord {
    pub path: &'static str,
    /// The settings as run (`solo_stripe` resolved to tokens).
    pub scheduler: SchedulerSettings,
    /// The solo stripe asked for, the tokens it resolved to, what bound it and why.
    pub solo_stripe: SoloStripeResolution,
    pub max_context: usize,
    pub kv_backend: String,
    /// The step overlap asked for, whether it ran and why.
    pub step_overlap: headroom_engine::OverlapResolution,
    /// CUDA graphs asked for, whether they ran and why.
    pub cuda_graphs: headroom_engine::GraphsResolution,
}

impl EngineRecord {
    pub fn of<B: Backend, M: StepModel<B>>(core: &EngineCore<B, M>) -> EngineRecord {
        let st = core.stats();
        EngineRecord {
            path: "engine",
            scheduler: st.settings,
            solo_stripe: st.solo_stripe,
            max_context: core.config().max_context,
            kv_backend: core.kv().resolved.to_string(),
            step_overlap: core.step_overlap().clone(),
            cuda_graphs: core.cuda_graphs().clone(),
        }
    }
}

/// The default settings, then the flags: `--chunk N` is the prefill chunk and the solo stripe (every step of the
/// lone request), `--solo-stripe` the stripe alone.
pub fn scheduler_settings(a: &TtftArgs) -> anyhow::Result<SchedulerSettings> {
    crate::engine_args::scheduler_settings(crate::engine_args::SchedulerFlags {
        chunk: a.chunk,
        solo_stripe: a.solo_stripe,
        ..Default::default()
    })
}

/// Rows the bench's requests need at most: the longest prompt, its decode
/// steps (measured, warm-up, profiled) and the first token, rounded up to 64.
pub fn max_context(a: &TtftArgs) -> usize {
    let longest = a.lengths.iter().copied().max().unwrap_or(1);
    let decode = if a.decode > 0 {
        a.decode.max(PROFILED_DECODE_STEPS) + DECODE_WARMUP_STEPS
    } else {
        0
    };
    (longest + decode + 1).div_ceil(64) * 64
}

/// The engine the bench runs: one request at a time, no memory budget,
/// contiguous KV.
pub fn engine_config(
    a: &TtftArgs,
    plan: AttentionPlan,
    scheduler: SchedulerSettings,
) -> EngineConfig {
    EngineConfig {
        scheduler,
        attention: plan,
        kv_backend: KvBackendKind::Contiguous,
        memory_budget_bytes: None,
        max_running: 1,
        max_context: max_context(a),
        max_waiting: 1,
        step_overlap: a.step_overlap,
        cuda_graphs: a.cuda_graphs,
        ..EngineConfig::default()
    }
}

/// What one request did.
pub struct Finished {
    pub usage: Usage,
    pub attention: Vec<AttentionRun>,
    pub tokens: Vec<u32>,
    /// Engine steps until the first token.
    pub steps_to_first_token: usize,
    /// When each token was drawn (after its step returned).
    pub drawn_at: Vec<Instant>,
}

/// Submits a greedy request of `max_tokens` and steps the engine until it
/// finishes; `between(tokens drawn so far)` runs after every step.
pub fn run_request<B: Backend, M: BenchModel<B>>(
    core: &mut EngineCore<B, M>,
    ids: &[u32],
    max_tokens: usize,
    between: &mut dyn FnMut(&EngineCore<B, M>, usize),
) -> anyhow::Result<Finished> {
    let mut stream = core
        .submit(GenerateRequest::greedy(ids.to_vec(), max_tokens))
        .map_err(|e| anyhow::anyhow!("the engine refused the prompt: {e}"))?;
    let (mut steps, mut first) = (0usize, None);
    let mut tokens = Vec::new();
    let mut drawn_at = Vec::new();
    let mut finished = None;
    while let Some(report) = core.step().context("engine step")? {
        steps += 1;
        let now = Instant::now();
        for s in &report.sampled {
            tokens.push(s.token);
            drawn_at.push(now);
            first.get_or_insert(steps);
        }
        while let Some(e) = stream.try_next() {
            match e {
                StreamEvent::Logprobs(_) => {}
                StreamEvent::Token(_) => {}
                StreamEvent::Finished {
                    usage, attention, ..
                } => finished = Some((usage, attention)),
                StreamEvent::Error(why) => bail!("the engine failed the request: {why}"),
            }
        }
        between(core, tokens.len());
    }
    let Some((usage, attention)) = finished else {
        bail!("the request did not finish after {steps} engine steps");
    };
    if tokens.len() != max_tokens {
        bail!(
            "the request drew {} tokens, expected {max_tokens}",
            tokens.len()
        );
    }
    Ok(Finished {
        usage,
        attention,
        tokens,
        steps_to_first_token: first.unwrap_or(steps),
        drawn_at,
    })
}

/// `layer 3 fused, layer 7 composed qL=512` — each (layer, route, block) that ran.
pub fn routes_ran(runs: &[AttentionRun]) -> String {
    crate::describe::route_summary(
        runs.iter()
            .map(|r| (r.layer, r.route.to_string(), r.query_block)),
    )
}

/// One prompt length measured through the engine.
pub struct LengthRun {
    pub ttft_ms: Vec<f64>,
    pub median_ttft_ms: f64,
    /// Each rank's backend bytes before the first measured run (weights + state).
    pub before_bytes_per_rank: Vec<usize>,
    /// Each rank's peak backend bytes over the measured runs.
    pub peak_bytes_per_rank: Vec<usize>,
    pub attention: String,
    pub steps_to_first_token: usize,
    /// Decode tokens/s and the first `--decode` greedy tokens.
    pub decode: Option<(f64, Vec<u32>)>,
    /// Each rank's parts of one profiled prefill (empty without --breakdown).
    pub breakdown: Vec<Vec<PartTime>>,
    /// Each rank's parts of the profiled decode steps.
    pub decode_breakdown: Vec<Vec<PartTime>>,
    pub decode_profiled_steps: usize,
    /// With --breakdown-each: each measured run's parts, each rank's.
    pub run_breakdowns: Vec<Vec<Vec<PartTime>>>,
    /// The GPU's clock and power over the measured runs (with a [`GpuClock`]).
    pub clock: Option<ClockStats>,
}

/// Measures prompt length `n` (see the module doc), sampling `clock` over
/// the measured runs.
pub fn measure<B: Backend, M: BenchModel<B>>(
    core: &mut EngineCore<B, M>,
    a: &TtftArgs,
    n: usize,
    clock: Option<&GpuClock>,
) -> anyhow::Result<LengthRun> {
    let ids = prompt(n, core.model().vocab_size());
    let mut times = Vec::new();
    let world = core.rank_memory().len();
    let mut peaks = vec![0usize; world];
    let mut before = Vec::new();
    let (mut attention, mut steps_to_first) = (String::new(), 0);
    let mut nothing = |_: &EngineCore<B, M>, _: usize| {};
    let mut run_breakdowns = Vec::new();
    let mut sampler = None;
    for it in 0..a.warmup + a.iterations {
        core.step_model().synchronize()?;
        if it == a.warmup {
            before = core.rank_memory().iter().map(|m| m.0).collect();
            sampler = clock.map(GpuClock::start);
        }
        core.step_model().reset_peak_memory();
        // The allocator's driver calls during the run (rank 0): a run that
        // asked the device for memory, or gave some back, got other blocks.
        let calls_before = core.step_model().lead().backend().memory_driver_calls();
        let (done, parts) = if a.breakdown_each && it >= a.warmup {
            let (done, parts) = profiled(core, ProfileMode::Queued, |c| {
                run_request(c, &ids, 1, &mut nothing)
            })?;
            (done, Some(parts))
        } else {
            (run_request(core, &ids, 1, &mut nothing)?, None)
        };
        let ms = done.usage.ttft_ms;
        let calls_after = core.step_model().lead().backend().memory_driver_calls();
        if it >= a.warmup {
            times.push(ms);
            for (p, m) in peaks.iter_mut().zip(core.rank_memory()) {
                *p = (*p).max(m.1);
            }
            attention = routes_ran(&done.attention);
            steps_to_first = done.steps_to_first_token;
        }
        let reserved = crate::describe::gib(core.step_model().rank_memory_reserved()[0] as u64);
        eprintln!(
            "  {n} tokens, run {it}: {ms:.1} ms ({} engine steps; device allocations {}, frees {}; \
             reserved {reserved:.2} GiB)",
            done.steps_to_first_token,
            calls_after.0 - calls_before.0,
            calls_after.1 - calls_before.1,
        );
        if let Some(parts) = parts {
            eprintln!(
                "    run {it}: {}",
                parts_line(parts.first().map_or(&[][..], |p| p))
            );
            run_breakdowns.push(parts);
        }
    }
    let clock_stats = sampler.zip(clock).and_then(|(sampler, clock)| {
        let window = sampler.finish();
        if let Some(e) = &window.error {
            eprintln!("  clock sampling stopped early: {e}");
        }
        ClockStats::of(&window.samples, clock.power_limit_mw())
    });
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let decode = if a.decode > 0 {
        let total = 1 + DECODE_WARMUP_STEPS + a.decode;
        let done = run_request(core, &ids, total, &mut nothing)?;
        let (from, to) = (done.drawn_at[DECODE_WARMUP_STEPS], done.drawn_at[total - 1]);
        let secs = to.duration_since(from).as_secs_f64().max(1e-9);
        Some((a.decode as f64 / secs, done.tokens[..a.decode].to_vec()))
    } else {
        None
    };
    let breakdown = if a.breakdown {
        profiled(core, ProfileMode::Synced, |c| {
            run_request(c, &ids, 1, &mut nothing).context("profiled prefill")
        })?
        .1
    } else {
        Vec::new()
    };
    let decode_profiled_steps = if a.breakdown && a.decode > 0 {
        PROFILED_DECODE_STEPS.min(a.decode)
    } else {
        0
    };
    let decode_breakdown = if decode_profiled_steps > 0 {
        // Profiling on from the first token to the last: the decode steps only.
        let mut switch = |c: &EngineCore<B, M>, drawn: usize| {
            if drawn == 1 {
                c.step_model().take_profile();
                c.step_model().set_profile_mode(ProfileMode::Synced);
            }
        };
        let run = run_request(core, &ids, 1 + decode_profiled_steps, &mut switch)
            .context("profiled decode");
        core.step_model().set_profile_mode(ProfileMode::Off);
        run?;
        core.step_model().take_profile()
    } else {
        Vec::new()
    };
    Ok(LengthRun {
        ttft_ms: times,
        median_ttft_ms: median,
        before_bytes_per_rank: before,
        peak_bytes_per_rank: peaks,
        attention,
        steps_to_first_token: steps_to_first,
        decode,
        breakdown,
        decode_breakdown,
        decode_profiled_steps,
        run_breakdowns,
        clock: clock_stats,
    })
}

/// `run` with the model's parts timed in `mode` (those before it cleared,
/// profiling off after it, also when it fails): its result and each rank's
/// parts.
fn profiled<B: Backend, M: BenchModel<B>, T>(
    core: &mut EngineCore<B, M>,
    mode: ProfileMode,
    run: impl FnOnce(&mut EngineCore<B, M>) -> anyhow::Result<T>,
) -> anyhow::Result<(T, Vec<Vec<PartTime>>)> {
    core.step_model().take_profile();
    core.step_model().set_profile_mode(mode);
    let out = run(core);
    core.step_model().set_profile_mode(ProfileMode::Off);
    Ok((out?, core.step_model().take_profile()))
}

/// `attention 172.1, moe 156.0, ... (sum 498.2 ms)`: one run's parts in
/// milliseconds, largest first.
pub fn parts_line(parts: &[PartTime]) -> String {
    let mut sorted: Vec<&PartTime> = parts.iter().collect();
    sorted.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    let each: Vec<String> = sorted
        .iter()
        .map(|p| format!("{} {:.1}", crate::describe::part(&p.part), p.seconds * 1e3))
        .collect();
    let sum: f64 = parts.iter().map(|p| p.seconds).sum();
    format!("{} (sum {:.1} ms)", each.join(", "), sum * 1e3)
}
