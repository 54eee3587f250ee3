//! `headroom bench ttft --tensor-parallel N`: the TTFT of `bench ttft` on a
//! tensor-parallel group — the same loop through the engine
//! (the parent `bench ttft`'s driver over the group as the engine's
//! `StepModel`) — with each rank's peak memory, the greedy tokens decoded
//! after the prompt (so split and unsplit runs can be compared token for
//! token), and with `--breakdown` each rank's per-part times including
//! `comm` (the collectives, waiting for the other ranks included) and its
//! share of the forward. Writes `headroom.bench.ttft.tp/2` JSON with `--json`.

use super::{build_engine, measure, print_parts, EngineRecord, LengthRun, TtftArgs};
use crate::tp::{size_list, GroupInfo, GroupJob};
use headroom_core::ops::Backend;
use headroom_engine::SchedulerSettings;
use headroom_model::profile::{Part, PartTime};
use headroom_model::{AttentionPlan, TpGroup};
use serde::Serialize;

#[derive(Debug, Serialize)]
struct RankBreakdown {
    rank: usize,
    parts: Vec<PartTime>,
    /// Seconds in collectives / seconds of every part.
    comm_share: f64,
}

#[derive(Debug, Serialize)]
struct LengthResult {
    tokens: usize,
    ttft_ms: Vec<f64>,
    median_ttft_ms: f64,
    tokens_per_s: f64,
    /// Peak backend bytes of each rank during the measured prefills (weights included).
    peak_bytes_per_rank: Vec<usize>,
    /// Peak bytes each rank's prefill added over its weights (the engine's state included).
    peak_transient_bytes_per_rank: Vec<usize>,
    attention: String,
    /// Engine steps (forwards) from submission to the first token.
    steps_to_first_token: usize,
    decode_tokens_per_s: Option<f64>,
    /// The greedy tokens after the prompt (`--decode` of them).
    decode_tokens: Vec<u32>,
    breakdown: Vec<RankBreakdown>,
    /// With --breakdown-each: each measured run's parts, each rank's
    /// (device time between events).
    run_breakdowns: Vec<Vec<RankBreakdown>>,
}

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    /// `engine`: each prompt ran as a request through the engine's scheduler.
    path: &'static str,
    backend: String,
    tensor_parallel: usize,
    model: String,
    load_seconds: f64,
    weight_bytes_per_rank: Vec<usize>,
    chunk: Option<usize>,
    /// The engine as run: scheduler settings, the solo stripe resolved and why.
    engine: EngineRecord,
    results: Vec<LengthResult>,
}

pub struct TtftJob<'a> {
    pub args: &'a TtftArgs,
    pub plan: AttentionPlan,
    pub model_name: String,
    pub scheduler: SchedulerSettings,
}

fn breakdown(profile: Vec<Vec<PartTime>>) -> Vec<RankBreakdown> {
    profile
        .into_iter()
        .enumerate()
        .map(|(rank, parts)| {
            let total: f64 = parts.iter().map(|p| p.seconds).sum();
            let comm: f64 = parts
                .iter()
                .filter(|p| p.part == Part::Comm)
                .map(|p| p.seconds)
                .sum();
            RankBreakdown {
                rank,
                parts,
                comm_share: if total > 0.0 { comm / total } else { 0.0 },
            }
        })
        .collect()
}

impl GroupJob for TtftJob<'_> {
    type Output = ();

    fn run<B: Backend + 'static>(self, group: TpGroup<B>, info: &GroupInfo) -> anyhow::Result<()> {
        let a = self.args;
        let mut core = build_engine(group, a, self.plan, self.scheduler)?;
        let mut results = Vec::new();
        for &n in &a.lengths {
            // One group spans several devices: no one device's clock to sample.
            let r: LengthRun = measure(&mut core, a, n, None)?;
            let transient: Vec<usize> = r
                .peak_bytes_per_rank
                .iter()
                .zip(&info.weight_bytes)
                .map(|(p, w)| p.saturating_sub(*w))
                .collect();
            let (decode_tps, decode_tokens) = match r.decode {
                Some((tps, tokens)) => (Some(tps), tokens),
                None => (None, Vec::new()),
            };
            println!(
                "{:>7} tokens  TTFT {:>9.1} ms  {:>8.0} tok/s  TP={}  peak per rank {}  {} steps  {}{}",
                n,
                r.median_ttft_ms,
                n as f64 / r.median_ttft_ms * 1e3,
                info.world,
                size_list(&r.peak_bytes_per_rank),
                r.steps_to_first_token,
                r.attention,
                decode_tps
                    .map(|t| format!("  decode {t:.1} tok/s"))
                    .unwrap_or_default()
            );
            let parts = breakdown(r.breakdown);
            for p in &parts {
                println!("    rank {}: comm {:.1} %", p.rank, p.comm_share * 100.0);
                print_parts("      ", &p.parts);
            }
            results.push(LengthResult {
                tokens: n,
                tokens_per_s: n as f64 / r.median_ttft_ms * 1e3,
                ttft_ms: r.ttft_ms,
                median_ttft_ms: r.median_ttft_ms,
                peak_bytes_per_rank: r.peak_bytes_per_rank,
                peak_transient_bytes_per_rank: transient,
                attention: r.attention,
                steps_to_first_token: r.steps_to_first_token,
                decode_tokens_per_s: decode_tps,
                decode_tokens,
                breakdown: parts,
                run_breakdowns: r.run_breakdowns.into_iter().map(breakdown).collect(),
            });
        }
        let report = Report {
            schema: "headroom.bench.ttft.tp/2",
            path: "engine",
            backend: info.backend.to_string(),
            tensor_parallel: info.world,
            model: self.model_name,
            load_seconds: info.load_seconds,
            weight_bytes_per_rank: info.weight_bytes.clone(),
            chunk: a.chunk,
            engine: EngineRecord::of(&core),
            results,
        };
        if let Some(path) = &a.json {
            let text = serde_json::to_string_pretty(&report)? + "\n";
            crate::output::write_file_atomically(path, text.as_bytes())?;
        }
        Ok(())
    }
}
