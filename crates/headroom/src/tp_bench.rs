//! `headroom bench ttft --tensor-parallel N`: the TTFT of `bench ttft` on a
//! tensor-parallel group, with each rank's peak memory, the greedy tokens
//! decoded after the prompt (so split and unsplit runs can be compared token
//! for token), and with `--breakdown` each rank's per-part times including
//! `comm` (the collectives, waiting for the other ranks included) and its
//! share of the forward. Writes `headroom.bench.ttft.tp/1` JSON with `--json`.

use crate::cmd::bench_ttft::TtftArgs;
use crate::cmd::logits::routes_that_ran;
use crate::tp::{gib_list, GroupInfo, GroupJob};
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_model::profile::{Part, PartTime};
use headroom_model::{AttentionPlan, ForwardOptions, LogitsRows, TpGroup};
use serde::Serialize;
use std::time::Instant;

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
    /// Peak bytes each rank's prefill added over its weights.
    peak_transient_bytes_per_rank: Vec<usize>,
    attention: String,
    decode_tokens_per_s: Option<f64>,
    /// The greedy tokens after the prompt (`--decode` of them).
    decode_tokens: Vec<u32>,
    breakdown: Vec<RankBreakdown>,
}

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    backend: String,
    tensor_parallel: usize,
    model: String,
    load_seconds: f64,
    weight_bytes_per_rank: Vec<usize>,
    chunk: Option<usize>,
    results: Vec<LengthResult>,
}

pub struct TtftJob<'a> {
    pub args: &'a TtftArgs,
    pub plan: AttentionPlan,
    pub model_name: String,
}

/// The same deterministic prompt as `bench ttft`.
fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    (0..n as u64)
        .map(|i| (headroom_core::ops::rng::bits(0x7474_6674, i) % vocab as u64) as u32)
        .collect()
}

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |b, (i, &x)| {
            if x > b.1 {
                (i, x)
            } else {
                b
            }
        })
        .0 as u32
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
        let opts = ForwardOptions {
            attention: self.plan.clone(),
            chunk: a.chunk,
            logits: LogitsRows::Last,
        };
        let mut results = Vec::new();
        for &n in &a.lengths {
            let ids = prompt(n, group.vocab_size());
            let capacity = n + a.decode + 1;
            let (mut times, mut attention) = (Vec::new(), String::new());
            let mut peaks = vec![0usize; group.world()];
            for it in 0..a.warmup + a.iterations {
                let mut s = group.new_session_with_capacity(capacity)?;
                group.synchronize()?;
                group.reset_peak_memory();
                let started = Instant::now();
                let out = group.prefill(&mut s, &ids, &opts).context("prefill")?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if out.logits.iter().any(|v| !v.is_finite()) {
                    bail!("non-finite logits at {n} tokens");
                }
                if it >= a.warmup {
                    times.push(ms);
                    for (p, m) in peaks.iter_mut().zip(group.memory()) {
                        *p = (*p).max(m.1);
                    }
                    attention = routes_that_ran(&out.attention);
                }
                eprintln!("  {n} tokens, run {it}: {ms:.1} ms");
            }
            let mut sorted = times.clone();
            sorted.sort_by(f64::total_cmp);
            let median = sorted[sorted.len() / 2];
            let (decode_tps, decode_tokens) = if a.decode > 0 {
                let mut s = group.new_session_with_capacity(capacity)?;
                let mut logits = group.prefill(&mut s, &ids, &opts)?.logits;
                let mut tokens = Vec::new();
                let started = Instant::now();
                for _ in 0..a.decode {
                    let next = argmax(&logits);
                    tokens.push(next);
                    logits = group.prefill(&mut s, &[next], &opts)?.logits;
                }
                (
                    Some(a.decode as f64 / started.elapsed().as_secs_f64()),
                    tokens,
                )
            } else {
                (None, Vec::new())
            };
            let parts = if a.breakdown {
                group.set_profiling(true);
                let mut s = group.new_session_with_capacity(capacity)?;
                group
                    .prefill(&mut s, &ids, &opts)
                    .context("profiled prefill")?;
                group.set_profiling(false);
                breakdown(group.take_profile())
            } else {
                Vec::new()
            };
            let transient: Vec<usize> = peaks
                .iter()
                .zip(&info.weight_bytes)
                .map(|(p, w)| p.saturating_sub(*w))
                .collect();
            println!(
                "{:>7} tokens  TTFT {:>9.1} ms  {:>8.0} tok/s  TP={}  peak GiB per rank {}  {}{}",
                n,
                median,
                n as f64 / median * 1e3,
                info.world,
                gib_list(&peaks),
                attention,
                decode_tps
                    .map(|t| format!("  decode {t:.1} tok/s"))
                    .unwrap_or_default()
            );
            for r in &parts {
                println!("    rank {}: comm {:.1} %", r.rank, r.comm_share * 100.0);
                for p in &r.parts {
                    println!(
                        "      {:<24} {:>9.2} ms  ({} calls)",
                        format!("{:?}", p.part),
                        p.seconds * 1e3,
                        p.calls
                    );
                }
            }
            results.push(LengthResult {
                tokens: n,
                ttft_ms: times,
                median_ttft_ms: median,
                tokens_per_s: n as f64 / median * 1e3,
                peak_bytes_per_rank: peaks,
                peak_transient_bytes_per_rank: transient,
                attention,
                decode_tokens_per_s: decode_tps,
                decode_tokens,
                breakdown: parts,
            });
        }
        let report = Report {
            schema: "headroom.bench.ttft.tp/1",
            backend: info.backend.to_string(),
            tensor_parallel: info.world,
            model: self.model_name,
            load_seconds: info.load_seconds,
            weight_bytes_per_rank: info.weight_bytes.clone(),
            chunk: a.chunk,
            results,
        };
        if let Some(path) = &a.json {
            std::fs::write(path, serde_json::to_string_pretty(&report)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}
