//! The human-readable output of the attention bench: one row per sample,
//! then the CPU bars (fused vs composed qL=512, memory ratio, GEMM ratio).

use crate::attention::{CAUSAL_FLOP_FORMULA, CHECKED_SUBSET};
use crate::gemm_baseline::GemmBaseline;
use crate::schema::{AttentionBenchFile, AttentionSample};
use headroom_core::Route;
use std::fmt::Write;

fn route_label(s: &AttentionSample) -> String {
    match (s.route, s.query_block) {
        (Route::Composed, Some(qb)) => format!("composed:{qb}"),
        (r, _) => r.to_string(),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The table, the formula, the checked subset and the bar lines.
pub fn render(file: &AttentionBenchFile, gemm: Option<&GemmBaseline>) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{CAUSAL_FLOP_FORMULA}");
    let _ = writeln!(
        o,
        "rel_err: relative Frobenius error vs f64 reference on {CHECKED_SUBSET}"
    );
    let _ = writeln!(
        o,
        "{:>7} {:>7} {:>14} {:>10} {:>10} {:>9} {:>13} {:>10}",
        "length", "history", "route", "median_ms", "min_ms", "GFLOP/s", "transient_MiB", "rel_err"
    );
    for s in &file.samples {
        let err = s.rel_err.map_or("NaN".to_string(), |e| format!("{e:.2e}"));
        let _ = writeln!(
            o,
            "{:>7} {:>7} {:>14} {:>10.2} {:>10.2} {:>9.1} {:>13.3} {:>10}",
            s.length,
            s.history,
            route_label(s),
            s.median_ms,
            s.min_ms,
            s.gflops,
            mib(s.transient_bytes),
            err
        );
    }
    if let Some(g) = gemm {
        let _ = writeln!(
            o,
            "gemm baseline: square f32 {n}x{n}x{n}, {} threads, median of {} runs interleaved with the arms: {:.2} ms, {:.1} GFLOP/s",
            g.threads,
            g.runs,
            g.median_ms,
            g.gflops,
            n = g.n
        );
    }
    for line in bars(file, gemm) {
        let _ = writeln!(o, "{line}");
    }
    o
}

/// Per length with both a fused and a composed qL=512 arm: the speed ratio,
/// the memory ratio, and fused GFLOP/s over the GEMM baseline.
pub fn bars(file: &AttentionBenchFile, gemm: Option<&GemmBaseline>) -> Vec<String> {
    let mut lines = Vec::new();
    let mut lengths: Vec<usize> = file.samples.iter().map(|s| s.length).collect();
    lengths.dedup();
    for length in lengths {
        let at = |route: Route, qb: Option<usize>| {
            file.samples.iter().find(|s| {
                s.length == length && s.route == route && (qb.is_none() || s.query_block == qb)
            })
        };
        let Some(fused) = at(Route::Fused, None) else {
            continue;
        };
        if let Some(c512) = at(Route::Composed, Some(512)) {
            lines.push(format!(
                "length {length}: fused speed = {:.2}x composed:512 (bar >= 0.90), transient = 1/{:.1} of composed:512 (bar >= 8)",
                c512.median_ms / fused.median_ms,
                c512.transient_bytes as f64 / fused.transient_bytes.max(1) as f64,
            ));
        }
        if let Some(g) = gemm {
            lines.push(format!(
                "length {length}: fused {:.1} GFLOP/s = {:.0}% of the square f32 GEMM's {:.1} (bar >= 50%)",
                fused.gflops,
                100.0 * fused.gflops / g.gflops,
                g.gflops
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{AttentionBenchFile, ATTENTION_SCHEMA};
    use headroom_core::Dtype;

    fn sample(
        route: Route,
        query_block: Option<usize>,
        median_ms: f64,
        bytes: u64,
    ) -> AttentionSample {
        AttentionSample {
            backend: "cpu".into(),
            length: 4096,
            history: 0,
            route,
            query_block,
            dtype: Dtype::Bf16,
            head_dim: 256,
            q_heads: 16,
            kv_heads: 2,
            iterations: 5,
            median_ms,
            min_ms: median_ms,
            gflops: 100.0 / median_ms,
            transient_bytes: bytes,
            rel_err: Some(1e-3),
        }
    }

    #[test]
    fn bars_compare_fused_with_composed_512_and_the_gemm() {
        let file = AttentionBenchFile {
            schema: ATTENTION_SCHEMA.into(),
            hardware: headroom_hardware::detect_cpu(),
            samples: vec![
                sample(Route::Composed, Some(512), 2.0, 1600),
                sample(Route::Fused, None, 1.0, 100),
            ],
        };
        let gemm = GemmBaseline {
            n: 2048,
            threads: 2,
            runs: 5,
            median_ms: 1.0,
            gflops: 200.0,
        };
        let lines = bars(&file, Some(&gemm));
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("2.00x composed:512"), "{}", lines[0]);
        assert!(lines[0].contains("1/16.0"), "{}", lines[0]);
        assert!(lines[1].contains("50% of"), "{}", lines[1]);
        let text = render(&file, Some(&gemm));
        assert!(text.contains("composed:512") && text.contains(CAUSAL_FLOP_FORMULA));
    }
}
