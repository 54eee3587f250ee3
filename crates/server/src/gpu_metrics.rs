//! The GPU's clock, power and energy in `/metrics`, read at each scrape
//! from a [`GpuReader`] (the `serve` command gives it NVML on the engine's
//! one CUDA device; a tensor-parallel group or the CPU has none): the SM
//! clock, the power draw and the enforced limit, whether the driver holds
//! the clocks down for power, and the energy counter. A power-capped card
//! runs below its boost clock, so a load's throughput is read with them;
//! `bench serve` samples them beside the pool and reports joules per token.
//! A reading that fails leaves the GPU lines out of that scrape.

use headroom_hardware::gpu_clock::POWER_REASONS;
use headroom_hardware::ClockSample;

/// One reading of the device: a clock sample and the power limit (mW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuReading {
    pub sample: ClockSample,
    pub power_limit_mw: u32,
}

/// What reads the device at a scrape.
pub type GpuReader = Box<dyn Fn() -> Result<GpuReading, String> + Send + Sync>;

/// The GPU lines of `/metrics`.
pub struct GpuMetrics {
    read: GpuReader,
}

impl std::fmt::Debug for GpuMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GpuMetrics")
    }
}

impl GpuMetrics {
    pub fn new(read: GpuReader) -> GpuMetrics {
        GpuMetrics { read }
    }

    /// The lines from NVML on CUDA device 0 (the engine's device when it is
    /// one), or why not.
    pub fn nvml_on_cuda_device0() -> Result<GpuMetrics, String> {
        let nvml = headroom_hardware::Nvml::for_cuda_device0()?;
        // A limit NVML will not tell is shown as 0.
        let power_limit_mw = nvml.power_limit_mw().unwrap_or(0);
        Ok(GpuMetrics::new(Box::new(move || {
            Ok(GpuReading {
                sample: nvml.sample()?,
                power_limit_mw,
            })
        })))
    }

    /// One line for the start-up: `SM 1980 MHz, 72 W of a 700 W power limit
    /// now (NVML)`, or why the reading failed.
    pub fn describe(&self) -> String {
        match (self.read)() {
            Ok(r) => format!(
                "SM {} MHz, {:.0} W of a {:.0} W power limit now (NVML)",
                r.sample.sm_mhz,
                r.sample.power_mw as f64 / 1e3,
                r.power_limit_mw as f64 / 1e3
            ),
            Err(e) => format!("unreadable now: {e}"),
        }
    }

    /// Appends the GPU's gauges (and energy counter) read now to `out`;
    /// nothing when the reading fails.
    pub fn render(&self, out: &mut String) {
        let Ok(r) = (self.read)() else {
            return;
        };
        let s = r.sample;
        let watts = |mw: u32| mw as f64 / 1e3;
        let mut lines: Vec<(&str, &str, &str, String)> = vec![
            (
                "headroom_gpu_sm_clock_mhz",
                "gauge",
                "The GPU's SM clock now (NVML), MHz.",
                s.sm_mhz.to_string(),
            ),
            (
                "headroom_gpu_power_watts",
                "gauge",
                "The GPU's power draw (NVML's figure, a moving average on recent GPUs), watts.",
                format!("{:.3}", watts(s.power_mw)),
            ),
            (
                "headroom_gpu_power_limit_watts",
                "gauge",
                "The power limit the GPU enforces, watts.",
                format!("{:.3}", watts(r.power_limit_mw)),
            ),
            (
                "headroom_gpu_clocks_held_for_power",
                "gauge",
                "1 while the driver holds the GPU's clocks down for power (software cap or hardware brake), else 0.",
                u8::from(s.reasons & POWER_REASONS != 0).to_string(),
            ),
        ];
        if let Some(mj) = s.energy_mj {
            lines.push((
                "headroom_gpu_energy_joules_total",
                "counter",
                "The GPU's energy counter (NVML, since the driver loaded), joules.",
                format!("{:.3}", mj as f64 / 1e3),
            ));
        }
        for (name, kind, help, v) in lines {
            crate::exposition::write_metric(out, name, kind, help, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(reasons: u64, energy_mj: Option<u64>) -> GpuReading {
        GpuReading {
            sample: ClockSample {
                sm_mhz: 1725,
                power_mw: 689_250,
                reasons,
                energy_mj,
            },
            power_limit_mw: 700_000,
        }
    }

    fn rendered(r: Result<GpuReading, String>) -> String {
        let mut out = String::new();
        GpuMetrics::new(Box::new(move || r.clone())).render(&mut out);
        out
    }

    #[test]
    fn a_reading_renders_its_gauges_and_energy() {
        let text = rendered(Ok(reading(0x4, Some(123_456_789))));
        for line in [
            "headroom_gpu_sm_clock_mhz 1725\n",
            "headroom_gpu_power_watts 689.250\n",
            "headroom_gpu_power_limit_watts 700.000\n",
            "headroom_gpu_clocks_held_for_power 1\n",
            "# TYPE headroom_gpu_energy_joules_total counter\nheadroom_gpu_energy_joules_total 123456.789\n",
        ] {
            assert!(text.contains(line), "{line:?} not in\n{text}");
        }
        // Idle (0x1) or thermal reasons are not power; no counter, no line.
        let idle = rendered(Ok(reading(0x1 | 0x20, None)));
        assert!(
            idle.contains("headroom_gpu_clocks_held_for_power 0\n"),
            "{idle}"
        );
        assert!(!idle.contains("energy"), "{idle}");
    }

    #[test]
    fn a_failed_reading_leaves_the_lines_out() {
        assert_eq!(rendered(Err("gone".into())), "");
        let gone = GpuMetrics::new(Box::new(|| Err("gone".into())));
        assert_eq!(gone.describe(), "unreadable now: gone");
    }

    #[test]
    fn the_start_up_line_names_the_clock_and_the_limit() {
        let r = reading(0, None);
        let g = GpuMetrics::new(Box::new(move || Ok(r)));
        assert_eq!(
            g.describe(),
            "SM 1725 MHz, 689 W of a 700 W power limit now (NVML)"
        );
    }
}
