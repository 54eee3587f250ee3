//! `qualify`: the decision rule and what it writes.
//!
//! Pipeline (driven by `headroom qualify`): per distinct full-attention layer
//! shape, the attention bench times composed qL ∈ {128, 256, 512, 1024,
//! whole} and fused ([`candidate_routes`]); [`leaders`] picks the arms the
//! prefill bench confirms; the prefill file is validated; [`decide`] applies
//! the rule of `docs/qualify.md`; [`crate::qualify_output::write_outputs`] writes the entry TOML
//! (bound to the evidence by SHA-256), the evidence JSON, the report and its
//! plots.

use crate::prefill::Arm;
use crate::prefill_schema::{PrefillBenchFile, PrefillSample};
use crate::schema::AttentionBenchFile;
use headroom_core::{LayerKind, Route, RouteRequest};
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{AttentionControl, QualifiedResult};
use serde::{Deserialize, Serialize};

pub const EVIDENCE_SCHEMA: &str = "headroom.qualify.evidence/1";

/// The composed query blocks a qualification tries (0 = one block of all rows).
pub const CANDIDATE_QUERY_BLOCKS: [usize; 5] = [128, 256, 512, 1024, 0];

/// The baseline every composed candidate must beat.
pub const BASELINE_QUERY_BLOCK: usize = 128;

/// The smallest relative noise margin the rule uses.
pub const NOISE_FLOOR: f64 = 0.02;

/// The attention-bench arms for one shape.
pub fn candidate_routes(fused_supported: bool) -> Vec<RouteRequest> {
    let mut r: Vec<RouteRequest> = CANDIDATE_QUERY_BLOCKS
        .iter()
        .map(|&query_block| RouteRequest::Composed { query_block })
        .collect();
    if fused_supported {
        r.push(RouteRequest::Fused);
    }
    r
}

/// Drops composed candidates whose f32 score block alone
/// (`q_heads × min(qL, L) × L × 4` bytes at the longest length `L`) exceeds
/// the budget: they could not win and might not fit (qL = whole at 32k).
pub fn affordable(
    routes: Vec<RouteRequest>,
    q_heads: usize,
    longest: usize,
    budget: u64,
) -> Vec<RouteRequest> {
    routes
        .into_iter()
        .filter(|r| match r {
            RouteRequest::Fused => true,
            RouteRequest::Composed { query_block } => {
                let rows = if *query_block == 0 {
                    longest
                } else {
                    (*query_block).min(longest)
                };
                let bytes = (q_heads as u128) * (rows as u128) * (longest as u128) * 4;
                *query_block == BASELINE_QUERY_BLOCK || bytes <= u128::from(budget)
            }
        })
        .collect()
}

/// The prefill arms confirming the attention bench: the baseline, the two
/// fastest other composed blocks within the budget (sum of medians over the
/// lengths), and fused when measured. `routes` are the bench's arms, in the
/// order it ran them (its samples are per length, in that order).
pub fn leaders(
    att: &AttentionBenchFile,
    routes: &[RouteRequest],
    transient_budget: u64,
) -> Vec<Arm> {
    let mut totals: Vec<(usize, f64)> = Vec::new();
    let mut fused = false;
    for chunk in att.samples.chunks(routes.len().max(1)) {
        for (s, r) in chunk.iter().zip(routes) {
            match r {
                RouteRequest::Fused => fused |= s.route == Route::Fused,
                RouteRequest::Composed { query_block } => {
                    let cost = if s.transient_bytes > transient_budget {
                        f64::INFINITY
                    } else {
                        s.median_ms
                    };
                    match totals.iter_mut().find(|(b, _)| b == query_block) {
                        Some((_, t)) => *t += cost,
                        None => totals.push((*query_block, cost)),
                    }
                }
            }
        }
    }
    totals.retain(|(q, t)| *q != BASELINE_QUERY_BLOCK && t.is_finite());
    totals.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut arms = vec![Arm {
        control: AttentionControl::Fallback,
        query_block: Some(BASELINE_QUERY_BLOCK),
    }];
    arms.extend(totals.iter().take(2).map(|(q, _)| Arm {
        control: AttentionControl::Fallback,
        query_block: Some(*q),
    }));
    if fused {
        arms.push(Arm {
            control: AttentionControl::Fused,
            query_block: None,
        });
    }
    arms
}

/// One candidate's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub arm: String,
    pub qualifies: bool,
    /// Why it does or does not, one line per length checked.
    pub reasons: Vec<String>,
}

/// What [`decide`] concluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    pub rule: String,
    pub noise_floor: f64,
    pub transient_budget_bytes: u64,
    pub verdicts: Vec<Verdict>,
    pub route: Route,
    pub query_block: Option<usize>,
}

impl Decision {
    pub fn result(&self) -> QualifiedResult {
        match (self.route, self.query_block) {
            (Route::Fused, _) => QualifiedResult::Fused,
            (_, q) => QualifiedResult::Composed {
                query_block: q.unwrap_or(BASELINE_QUERY_BLOCK),
            },
        }
    }
}

/// The rule, stated once (also in `docs/qualify.md`).
pub const RULE: &str = "composed qL qualifies if, at every length, its median TTFT is below the \
qL=128 median by more than the noise margin (the larger relative spread (max-min)/median of the \
two arms, at least the floor) and its attention transient peak is within the budget; the \
qualifying qL fastest at the longest length wins, else qL=128 stands. fused wins instead if, at \
every length, its median TTFT is no slower than the best composed arm's by more than the margin \
and its transient is within the budget.";

fn spread(s: &PrefillSample) -> f64 {
    (s.ttft_ms.max - s.ttft_ms.min) / s.ttft_ms.median
}

fn margin(a: &PrefillSample, b: &PrefillSample) -> f64 {
    spread(a).max(spread(b)).max(NOISE_FLOOR)
}

/// Applies [`RULE`] to a validated prefill file.
pub fn decide(prefill: &PrefillBenchFile, transient_budget: u64) -> Decision {
    let at = |arm: &str, len: usize| {
        prefill
            .samples
            .iter()
            .find(|s| s.arm == arm && s.length == len)
    };
    let base = format!("fallback:{BASELINE_QUERY_BLOCK}");
    let mut arms: Vec<String> = Vec::new();
    for s in &prefill.samples {
        if !arms.contains(&s.arm) {
            arms.push(s.arm.clone());
        }
    }
    let longest = prefill.lengths.iter().copied().max().unwrap_or(0);
    let mut verdicts = Vec::new();
    let mut best: Option<(usize, f64)> = None;
    for arm in arms
        .iter()
        .filter(|a| a.starts_with("fallback:") && **a != base)
    {
        let mut v = Verdict {
            arm: arm.clone(),
            qualifies: true,
            reasons: Vec::new(),
        };
        for &len in &prefill.lengths {
            let (Some(c), Some(b)) = (at(arm, len), at(&base, len)) else {
                v.qualifies = false;
                v.reasons
                    .push(format!("length {len}: not measured against {base}"));
                continue;
            };
            let m = margin(c, b);
            let ok_time = c.ttft_ms.median < b.ttft_ms.median * (1.0 - m);
            let ok_mem = c.memory.attention_transient_peak_bytes <= transient_budget;
            v.qualifies &= ok_time && ok_mem;
            v.reasons.push(format!(
                "length {len}: {:.3} ms vs {base} {:.3} ms, margin {:.1}% -> {}; transient {} B {} budget",
                c.ttft_ms.median,
                b.ttft_ms.median,
                m * 100.0,
                if ok_time { "faster" } else { "not faster" },
                c.memory.attention_transient_peak_bytes,
                if ok_mem { "within" } else { "over" }
            ));
        }
        if v.qualifies {
            let q: usize = arm["fallback:".len()..]
                .parse()
                .unwrap_or(BASELINE_QUERY_BLOCK);
            if let Some(t) = at(arm, longest).map(|s| s.ttft_ms.median) {
                if best.is_none_or(|(_, bt)| t < bt) {
                    best = Some((q, t));
                }
            }
        }
        verdicts.push(v);
    }
    let composed_q = best.map_or(BASELINE_QUERY_BLOCK, |(q, _)| q);
    let mut route = Route::Composed;
    if arms.iter().any(|a| a == "fused") {
        let mut v = Verdict {
            arm: "fused".into(),
            qualifies: true,
            reasons: Vec::new(),
        };
        for &len in &prefill.lengths {
            // The best composed arm at this length among those measured.
            let best_c = prefill
                .samples
                .iter()
                .filter(|s| s.length == len && s.arm.starts_with("fallback:"))
                .min_by(|a, b| a.ttft_ms.median.total_cmp(&b.ttft_ms.median));
            let (Some(f), Some(c)) = (at("fused", len), best_c) else {
                v.qualifies = false;
                v.reasons
                    .push(format!("length {len}: fused or composed not measured"));
                continue;
            };
            let m = margin(f, c);
            let ok_time = f.ttft_ms.median <= c.ttft_ms.median * (1.0 + m);
            let ok_mem = f.memory.attention_transient_peak_bytes <= transient_budget;
            v.qualifies &= ok_time && ok_mem;
            v.reasons.push(format!(
                "length {len}: {:.3} ms vs best composed {} {:.3} ms, margin {:.1}% -> {}; transient {} B {} budget",
                f.ttft_ms.median,
                c.arm,
                c.ttft_ms.median,
                m * 100.0,
                if ok_time { "no slower" } else { "slower" },
                f.memory.attention_transient_peak_bytes,
                if ok_mem { "within" } else { "over" }
            ));
        }
        if v.qualifies {
            route = Route::Fused;
        }
        verdicts.push(v);
    }
    Decision {
        rule: RULE.to_string(),
        noise_floor: NOISE_FLOOR,
        transient_budget_bytes: transient_budget,
        verdicts,
        route,
        query_block: (route == Route::Composed).then_some(composed_q),
    }
}

/// The evidence file an entry cites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QualifyEvidence {
    pub schema: String,
    pub id: String,
    pub layer: LayerKind,
    pub attention: AttentionBenchFile,
    pub prefill: PrefillBenchFile,
    pub decision: Decision,
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let t: String = out.trim_matches('-').chars().take(24).collect();
    t.trim_end_matches('-').to_string()
}

/// The entry id: the identity the entry matches on (the GPU for CUDA — its
/// name and SM count, never the host; the CPU and its cores for the CPU),
/// the layer shape and the result.
pub fn entry_id(hw: &HardwareFingerprint, layer: &LayerKind, result: &QualifiedResult) -> String {
    let machine = match (&hw.device_name, hw.device_compute_units) {
        (Some(name), Some(sms)) => format!("{}-{sms}sm", slug(name)),
        (Some(name), None) => slug(name),
        (None, _) => format!("{}-{}c", slug(&hw.cpu_brand), hw.cpu_cores),
    };
    let res = match result {
        QualifiedResult::Fused => "fused".to_string(),
        QualifiedResult::Composed { query_block } => format!("q{query_block}"),
    };
    format!(
        "{}-{machine}-d{}-h{}kv{}-{}-{res}",
        hw.backend, layer.head_dim, layer.q_heads, layer.kv_heads, layer.dtype
    )
}

/// Relative paths of everything one qualification writes in the output folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPaths {
    pub entry: String,
    pub evidence: String,
    pub report: String,
    pub ttft_plot: String,
    pub transient_plot: String,
}

impl OutputPaths {
    pub fn for_id(id: &str) -> OutputPaths {
        OutputPaths {
            entry: format!("{id}.toml"),
            evidence: format!("evidence/{id}.json"),
            report: format!("{id}.md"),
            ttft_plot: format!("plots/{id}-ttft.svg"),
            transient_plot: format!("plots/{id}-transient.svg"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::{AttentionKind, BackendKind, Dtype};

    fn d256() -> LayerKind {
        LayerKind {
            attention: AttentionKind::Full,
            head_dim: 256,
            q_heads: 16,
            kv_heads: 2,
            dtype: Dtype::Bf16,
        }
    }

    fn host(cores: usize) -> HardwareFingerprint {
        HardwareFingerprint {
            backend: BackendKind::Cpu,
            machine_model: "box".into(),
            cpu_brand: "Intel(R) Xeon(R) Processor".into(),
            cpu_cores: cores,
            memory_gib: 125,
            device_name: None,
            device_compute_units: None,
            device_memory_gib: None,
            compute_capability: None,
            driver_version: None,
        }
    }

    #[test]
    fn cuda_ids_name_the_gpu_not_the_host() {
        let gpu = |cores| HardwareFingerprint {
            backend: BackendKind::Cuda,
            device_name: Some("NVIDIA H200".into()),
            device_compute_units: Some(132),
            device_memory_gib: Some(139),
            ..host(cores)
        };
        let id = entry_id(&gpu(16), &d256(), &QualifiedResult::Fused);
        assert_eq!(id, "cuda-nvidia-h200-132sm-d256-h16kv2-bf16-fused");
        assert_eq!(id, entry_id(&gpu(32), &d256(), &QualifiedResult::Fused));
        let cpu = entry_id(
            &host(2),
            &d256(),
            &QualifiedResult::Composed { query_block: 512 },
        );
        assert_eq!(cpu, "cpu-intel-r-xeon-r-processor-2c-d256-h16kv2-bf16-q512");
    }
}
