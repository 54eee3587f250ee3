//! `bench serve` over a list of concurrency levels: one [`serve_load`] run per
//! level, in the order given, each with the whole request count and time
//! limit; the `headroom.bench.serve/3` report ([`SweepReport`]: the workload
//! once, then one entry per level), a summary table, and an SVG plot of
//! output tokens/s against concurrency.
//!
//! [`serve_load`]: crate::serve_load

use crate::report_svg::{line_plot, LinePlot};
use crate::serve_load::{self as load, LoadReport};
use crate::serve_workload::LoadConfig;
use serde::Serialize;

pub const SCHEMA: &str = "headroom.bench.serve/3";
/// Most concurrency levels one sweep may run.
pub const MAX_LEVELS: usize = 32;

/// The workload and one run per concurrency level.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub schema: &'static str,
    pub url: String,
    pub requests: usize,
    pub prompt_len: usize,
    pub max_tokens: usize,
    pub ignore_eos: bool,
    /// Turns per conversation (1: single requests; `requests` counts
    /// conversations).
    pub turns: usize,
    /// Fresh prompt tokens each later turn adds.
    pub turn_len: usize,
    /// The limit of each run (not of the whole sweep).
    pub time_limit_s: f64,
    /// The levels, in the order run.
    pub concurrency: Vec<usize>,
    /// One entry per level, same order.
    pub runs: Vec<LoadReport>,
}

impl SweepReport {
    /// Failed requests over every run.
    pub fn failed(&self) -> usize {
        self.runs.iter().map(|r| r.failed).sum()
    }
}

/// `--concurrency`: a comma-separated list of distinct levels in
/// `1..=MAX_CONCURRENCY` (e.g. `1,16,64,256`).
pub fn parse_concurrency(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let c: usize = part.parse().map_err(|_| {
            format!("--concurrency takes a comma-separated list of client counts (e.g. 1,16,64); got `{s}`")
        })?;
        if c == 0 || c > load::MAX_CONCURRENCY {
            return Err(format!(
                "--concurrency values must be in 1..={} (got {c})",
                load::MAX_CONCURRENCY
            ));
        }
        if out.contains(&c) {
            return Err(format!("--concurrency lists {c} twice"));
        }
        if out.len() == MAX_LEVELS {
            return Err(format!("--concurrency takes at most {MAX_LEVELS} values"));
        }
        out.push(c);
    }
    Ok(out)
}

/// Runs `base` once per level of `levels` (the level replaces
/// `base.concurrency`); `Err` only for a bad configuration, checked for
/// every level before the first run.
pub async fn run(base: LoadConfig, levels: &[usize]) -> Result<SweepReport, String> {
    if levels.is_empty() || levels.len() > MAX_LEVELS {
        return Err(format!(
            "--concurrency takes 1..={MAX_LEVELS} values (got {})",
            levels.len()
        ));
    }
    for &c in levels {
        load::check_config(&LoadConfig {
            concurrency: c,
            ..base.clone()
        })?;
    }
    let mut runs = Vec::with_capacity(levels.len());
    for (i, &c) in levels.iter().enumerate() {
        let r = load::run(LoadConfig {
            concurrency: c,
            ..base.clone()
        })
        .await?;
        headroom_core::progress::report(
            "bench serve",
            i as u64 + 1,
            levels.len() as u64,
            "levels",
            &format!(
                "concurrency {c}: {:.1} output tok/s, {} failed",
                r.output_tokens_per_s, r.failed
            ),
        );
        runs.push(r);
    }
    Ok(SweepReport {
        schema: SCHEMA,
        url: format!("http://{}", base.addr),
        requests: base.requests,
        prompt_len: base.prompt_len,
        max_tokens: base.max_tokens,
        ignore_eos: base.ignore_eos,
        turns: base.turns.max(1),
        turn_len: base.turn_len,
        time_limit_s: base.time_limit.as_secs_f64(),
        concurrency: levels.to_vec(),
        runs,
    })
}

/// Each run's table, then (for more than one level) one line per level.
pub fn table(r: &SweepReport) -> String {
    let conversations = if r.turns > 1 {
        format!(
            ", in conversations of {} turns (each later turn resends the previous prompt + {} tokens)",
            r.turns, r.turn_len
        )
    } else {
        String::new()
    };
    let mut out = format!(
        "workload: {} requests of {} prompt tokens and {} generated tokens{}{conversations}\n",
        r.requests,
        r.prompt_len,
        r.max_tokens,
        if r.ignore_eos {
            " (EOS ignored)"
        } else {
            " (at most; EOS ends a request)"
        }
    );
    for run in &r.runs {
        out.push('\n');
        out.push_str(&load::table(run));
    }
    if r.runs.len() > 1 {
        out.push_str(&format!(
            "\n{:>6} {:>11} {:>11} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>5} {:>6}\n",
            "conc",
            "out tok/s",
            "tot tok/s",
            "ttft p50",
            "ttft p90",
            "ttft p99",
            "itl p50",
            "itl p90",
            "itl p99",
            "completed",
            "cut",
            "failed"
        ));
        for x in &r.runs {
            out.push_str(&format!(
                "{:>6} {:>11.1} {:>11.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>9} {:>5} {:>6}\n",
                x.concurrency,
                x.output_tokens_per_s,
                x.total_tokens_per_s,
                x.ttft_ms.p50,
                x.ttft_ms.p90,
                x.ttft_ms.p99,
                x.itl_ms.p50,
                x.itl_ms.p90,
                x.itl_ms.p99,
                x.completed,
                x.cut,
                x.failed
            ));
        }
    }
    out
}

/// Output tokens/s against concurrency: one point per run.
pub fn throughput_svg(r: &SweepReport) -> String {
    let pts = r
        .runs
        .iter()
        .map(|x| (x.concurrency as f64, x.output_tokens_per_s))
        .collect();
    let title = format!(
        "Output tok/s vs concurrency ({} prompt + {} generated tokens)",
        r.prompt_len, r.max_tokens
    );
    line_plot(&LinePlot {
        title: &title,
        xlabel: "concurrency",
        xunit: "clients",
        ylabel: "output tok/s",
        xs: r.concurrency.iter().map(|&c| c as f64).collect(),
        series: vec![("output tok/s".to_string(), pts)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_lists_parse_and_bad_ones_name_the_flag() {
        assert_eq!(parse_concurrency("8").unwrap(), vec![8]);
        assert_eq!(
            parse_concurrency("1,16, 64,256").unwrap(),
            vec![1, 16, 64, 256]
        );
        for bad in ["", "0", "1,,2", "a", "-1", "4,4", "1025", "1.5", "16,"] {
            let e = parse_concurrency(bad).unwrap_err();
            assert!(e.contains("--concurrency"), "{bad}: {e}");
        }
        let many: Vec<String> = (1..=MAX_LEVELS + 1).map(|c| c.to_string()).collect();
        assert!(parse_concurrency(&many.join(","))
            .unwrap_err()
            .contains("at most"));
    }
}
