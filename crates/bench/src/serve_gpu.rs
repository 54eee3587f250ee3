//! The GPU over a `bench serve` run, from the server's `/metrics` GPU lines
//! (`headroom_gpu_*`, which `headroom serve` reads from NVML on its one CUDA
//! device): each pool sample's SM clock, power and held-for-power flag
//! ([`GpuSample`]), and the energy counter read before and after the run —
//! together [`GpuRun`]: joules per generated token and per token, the clock's
//! mean and minimum, the power's mean against the limit, and the share of
//! samples in which the clocks were held down for power. A power-capped card
//! serves at less than its boost clock, so a throughput is read with these.
//! A server without the lines gives `None`, not an error.

use crate::prom_text::metric_f64 as metric;
use serde::Serialize;

/// The GPU at one pool sample.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuSample {
    pub sm_clock_mhz: f64,
    pub power_w: f64,
    /// The driver held the clocks down for power at that moment.
    pub held_for_power: bool,
}

/// The GPU gauges of a Prometheus text; `None` unless all three are there.
pub fn parse(text: &str) -> Option<GpuSample> {
    Some(GpuSample {
        sm_clock_mhz: metric(text, "headroom_gpu_sm_clock_mhz")?,
        power_w: metric(text, "headroom_gpu_power_watts")?,
        held_for_power: metric(text, "headroom_gpu_clocks_held_for_power")? > 0.0,
    })
}

/// `headroom_gpu_energy_joules_total`, when the server has it.
pub fn energy_j(text: &str) -> Option<f64> {
    metric(text, "headroom_gpu_energy_joules_total")
}

/// `headroom_gpu_power_limit_watts`, when the server has it.
pub fn power_limit_w(text: &str) -> Option<f64> {
    metric(text, "headroom_gpu_power_limit_watts")
}

/// The GPU over one run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuRun {
    /// Pool samples that carried the GPU gauges.
    pub samples: usize,
    pub sm_clock_mhz_mean: Option<f64>,
    pub sm_clock_mhz_min: Option<f64>,
    pub power_w_mean: Option<f64>,
    pub power_limit_w: Option<f64>,
    /// Share of the samples with the clocks held down for power.
    pub power_capped_share: Option<f64>,
    /// The energy counter's change over the run (`None` without it at both
    /// ends, when it went back — a restarted driver — or when it did not
    /// move: a run shorter than the counter's update period).
    pub energy_j: Option<f64>,
    pub joules_per_output_token: Option<f64>,
    /// Per prompt and generated token.
    pub joules_per_token: Option<f64>,
}

/// What the run's pool `samples` and the energy counter `before` and
/// `after` say, with the run's generated and total tokens; `None` when the
/// server gave no GPU line at all.
pub fn run_stats(
    samples: &[&GpuSample],
    energy: (Option<f64>, Option<f64>),
    power_limit_w: Option<f64>,
    output_tokens: u64,
    total_tokens: u64,
) -> Option<GpuRun> {
    let energy_j = match energy {
        (Some(b), Some(a)) if a > b => Some(a - b),
        _ => None,
    };
    if samples.is_empty() && energy_j.is_none() {
        return None;
    }
    let n = samples.len();
    let mean = |f: fn(&GpuSample) -> f64| {
        (n > 0).then(|| samples.iter().map(|s| f(s)).sum::<f64>() / n as f64)
    };
    let per = |tokens: u64| energy_j.filter(|_| tokens > 0).map(|j| j / tokens as f64);
    Some(GpuRun {
        samples: n,
        sm_clock_mhz_mean: mean(|s| s.sm_clock_mhz),
        sm_clock_mhz_min: samples.iter().map(|s| s.sm_clock_mhz).reduce(f64::min),
        power_w_mean: mean(|s| s.power_w),
        power_limit_w,
        power_capped_share: mean(|s| f64::from(u8::from(s.held_for_power))),
        energy_j,
        joules_per_output_token: per(output_tokens),
        joules_per_token: per(total_tokens),
    })
}

/// The text report's GPU line (`gpu: …`), empty without a run.
pub fn summary(run: Option<&GpuRun>) -> String {
    let Some(r) = run else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let (Some(j), Some(out), Some(all)) =
        (r.energy_j, r.joules_per_output_token, r.joules_per_token)
    {
        parts.push(format!(
            "{j:.0} J over the run, {out:.3} J per generated token, {all:.4} J per token"
        ));
    }
    if let (Some(mean), Some(min)) = (r.sm_clock_mhz_mean, r.sm_clock_mhz_min) {
        parts.push(format!("SM clock {mean:.0} MHz mean (min {min:.0})"));
    }
    if let Some(p) = r.power_w_mean {
        let limit = r
            .power_limit_w
            .map(|l| format!(" of {l:.0}"))
            .unwrap_or_default();
        parts.push(format!("power {p:.0}{limit} W mean"));
    }
    if let Some(share) = r.power_capped_share {
        parts.push(format!(
            "clocks held for power in {:.0} % of {} samples",
            share * 100.0,
            r.samples
        ));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("gpu: {}\n", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE headroom_gpu_sm_clock_mhz gauge\nheadroom_gpu_sm_clock_mhz 1725\n\
                        headroom_gpu_power_watts 689.250\nheadroom_gpu_power_limit_watts 700.000\n\
                        headroom_gpu_clocks_held_for_power 1\n\
                        headroom_gpu_energy_joules_total 123456.789\n";

    #[test]
    fn the_gauges_and_the_counter_parse() {
        assert_eq!(
            parse(TEXT),
            Some(GpuSample {
                sm_clock_mhz: 1725.0,
                power_w: 689.25,
                held_for_power: true
            })
        );
        assert_eq!(energy_j(TEXT), Some(123456.789));
        assert_eq!(power_limit_w(TEXT), Some(700.0));
        // A server without the lines (the CPU, a tensor-parallel group).
        let cpu = "headroom_requests_running 3\n";
        assert_eq!(
            (parse(cpu), energy_j(cpu), power_limit_w(cpu)),
            (None, None, None)
        );
        // One gauge missing: no sample.
        assert_eq!(parse("headroom_gpu_sm_clock_mhz 1725\n"), None);
    }

    fn sample(mhz: f64, w: f64, held: bool) -> GpuSample {
        GpuSample {
            sm_clock_mhz: mhz,
            power_w: w,
            held_for_power: held,
        }
    }

    #[test]
    fn a_run_sums_its_samples_and_divides_its_energy_by_its_tokens() {
        let s = [sample(1800.0, 600.0, false), sample(1600.0, 700.0, true)];
        let refs: Vec<&GpuSample> = s.iter().collect();
        let r = run_stats(&refs, (Some(1000.0), Some(1500.0)), Some(700.0), 250, 1000).unwrap();
        assert_eq!(r.samples, 2);
        assert_eq!(r.sm_clock_mhz_mean, Some(1700.0));
        assert_eq!(r.sm_clock_mhz_min, Some(1600.0));
        assert_eq!(r.power_w_mean, Some(650.0));
        assert_eq!(r.power_capped_share, Some(0.5));
        assert_eq!(r.energy_j, Some(500.0));
        assert_eq!(r.joules_per_output_token, Some(2.0));
        assert_eq!(r.joules_per_token, Some(0.5));
        assert_eq!(
            summary(Some(&r)),
            "gpu: 500 J over the run, 2.000 J per generated token, 0.5000 J per token; \
             SM clock 1700 MHz mean (min 1600); power 650 of 700 W mean; \
             clocks held for power in 50 % of 2 samples\n"
        );
    }

    #[test]
    fn missing_pieces_stay_none() {
        // No GPU lines at all: no run.
        assert_eq!(run_stats(&[], (None, None), None, 10, 20), None);
        assert_eq!(summary(None), "");
        // The counter went back (a restarted driver) or is missing at one end.
        let s = [sample(1500.0, 500.0, false)];
        let refs: Vec<&GpuSample> = s.iter().collect();
        // or did not move (too short a run to resolve).
        for energy in [
            (Some(9.0), Some(2.0)),
            (None, Some(2.0)),
            (Some(1.0), None),
            (Some(4.0), Some(4.0)),
        ] {
            let r = run_stats(&refs, energy, None, 10, 20).unwrap();
            assert_eq!((r.energy_j, r.joules_per_output_token), (None, None));
            assert!(!summary(Some(&r)).contains(" J "), "{}", summary(Some(&r)));
        }
        // Energy but no samples (sampling off) and no tokens.
        let r = run_stats(&[], (Some(1.0), Some(3.0)), None, 0, 0).unwrap();
        assert_eq!((r.samples, r.energy_j), (0, Some(2.0)));
        assert_eq!(
            (r.joules_per_output_token, r.sm_clock_mhz_mean),
            (None, None)
        );
    }
}
