//! The GPU's clock and power beside a measurement: [`ClockSampler`] polls a
//! sample source (NVML's, [`crate::Nvml`]) on its own thread while the
//! measured work runs, and [`ClockStats`] sums the samples up — the SM
//! clock's mean and range, the power against the enforced limit, and the
//! share of samples in which the driver held the clocks down for power or
//! heat. A timed prefill on a power-capped card runs below its boost clock
//! (docs/perf/serving.md, session 42: an H100's FP8 32k prefill at 700 W,
//! SM clock 1,722 MHz mean against 1,980), so a time is read with its clock.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One reading: the SM clock, the power draw, NVML's clock event reasons
/// (`nvmlClocksEventReasons`) and the energy counter (millijoules since the
/// driver loaded; `None` where there is none) at that moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    pub sm_mhz: u32,
    pub power_mw: u32,
    pub reasons: u64,
    pub energy_mj: Option<u64>,
}

/// The reason bits of a clock held down by power: the software power cap
/// (`0x4`) and the hardware power brake (`0x80`).
pub const POWER_REASONS: u64 = 0x4 | 0x80;
/// ... and by heat or a hardware slowdown: `0x8` (HW slowdown), `0x20` (SW
/// thermal), `0x40` (HW thermal).
pub const THERMAL_REASONS: u64 = 0x8 | 0x20 | 0x40;

/// The samples of one measured window, summed up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockStats {
    pub samples: usize,
    pub sm_mhz_mean: f64,
    pub sm_mhz_min: u32,
    pub sm_mhz_max: u32,
    pub power_w_mean: f64,
    pub power_w_max: f64,
    /// The limit the device enforces (0 when NVML did not say).
    pub power_limit_w: f64,
    /// Share of samples whose clocks were held down for power ([`POWER_REASONS`]).
    pub power_capped_share: f64,
    /// Share held down for heat or a hardware slowdown ([`THERMAL_REASONS`]).
    pub thermal_share: f64,
    /// Joules from the first sample to the last (the energy counter's
    /// difference; `None` without a counter at both ends, or when it did
    /// not move: a window shorter than the counter's update period — an H100
    /// read 0 J over two samples 10 ms apart at 133 W — is not resolved).
    pub energy_j: Option<f64>,
}

impl ClockStats {
    /// The stats of `samples` (`None` when there are none).
    pub fn of(samples: &[ClockSample], power_limit_mw: u32) -> Option<ClockStats> {
        let n = samples.len();
        if n == 0 {
            return None;
        }
        let share =
            |mask: u64| samples.iter().filter(|s| s.reasons & mask != 0).count() as f64 / n as f64;
        let mhz = samples.iter().map(|s| s.sm_mhz);
        let watts = samples.iter().map(|s| s.power_mw as f64 / 1e3);
        Some(ClockStats {
            samples: n,
            sm_mhz_mean: mhz.clone().map(f64::from).sum::<f64>() / n as f64,
            sm_mhz_min: mhz.clone().min().unwrap_or(0),
            sm_mhz_max: mhz.max().unwrap_or(0),
            power_w_mean: watts.clone().sum::<f64>() / n as f64,
            power_w_max: watts.fold(0.0, f64::max),
            power_limit_w: power_limit_mw as f64 / 1e3,
            power_capped_share: share(POWER_REASONS),
            thermal_share: share(THERMAL_REASONS),
            energy_j: match (samples[0].energy_mj, samples[n - 1].energy_mj) {
                (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e3),
                _ => None,
            },
        })
    }

    /// One line: `SM 1722 MHz mean (1530-1950), 643 of 700 W; power-capped
    /// in 100 % of 109 samples; 1402.5 J`.
    pub fn summary(&self) -> String {
        let limit = if self.power_limit_w > 0.0 {
            format!(" of {:.0} W", self.power_limit_w)
        } else {
            " W".into()
        };
        let mut held = format!(
            "power-capped in {:.0} % of {} samples",
            self.power_capped_share * 100.0,
            self.samples
        );
        if self.thermal_share > 0.0 {
            held += &format!(", thermal in {:.0} %", self.thermal_share * 100.0);
        }
        if let Some(j) = self.energy_j {
            held += &format!("; {j:.1} J");
        }
        format!(
            "SM {:.0} MHz mean ({}-{}), {:.0}{limit}; {held}",
            self.sm_mhz_mean, self.sm_mhz_min, self.sm_mhz_max, self.power_w_mean
        )
    }
}

/// Most samples one window keeps (≈ 16 min at the default period): bounds the
/// memory of a sampler left running.
pub const MAX_SAMPLES: usize = 100_000;

/// The period [`ClockSampler::start`] polls at unless told otherwise.
pub const DEFAULT_PERIOD: Duration = Duration::from_millis(10);

/// What a [`ClockSampler`] gathered: its samples, and the source's error
/// if one ended the sampling early.
#[derive(Debug, Default, PartialEq)]
pub struct ClockWindow {
    pub samples: Vec<ClockSample>,
    pub error: Option<String>,
}

/// A thread sampling a source every period from [`ClockSampler::start`]
/// until [`ClockSampler::finish`], one sample at each end included (so a
/// window shorter than the period still has two). A source's error ends the
/// sampling: the samples so far are kept and the error is returned beside
/// them. Dropped unfinished (the measurement failed), it stops its thread
/// the same way.
pub struct ClockSampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ClockWindow>>,
}

impl ClockSampler {
    /// Starts sampling `source` every `period`.
    pub fn start<F>(mut source: F, period: Duration) -> ClockSampler
    where
        F: FnMut() -> Result<ClockSample, String> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut w = ClockWindow::default();
            // false once the source fails (its error kept).
            let mut take = |w: &mut ClockWindow| match source() {
                Ok(s) => {
                    if w.samples.len() < MAX_SAMPLES {
                        w.samples.push(s);
                    }
                    true
                }
                Err(e) => {
                    w.error = Some(e);
                    false
                }
            };
            if !take(&mut w) {
                return w;
            }
            loop {
                // An unpark from `finish` ends the wait at once.
                std::thread::park_timeout(period);
                // Read before sampling: the sample after a stop is the last.
                let last = seen.load(Ordering::Acquire);
                if !take(&mut w) || last {
                    break;
                }
            }
            w
        });
        ClockSampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the thread (after one last sample) and returns what it gathered.
    pub fn finish(mut self) -> ClockWindow {
        self.stop_thread()
    }

    fn stop_thread(&mut self) -> ClockWindow {
        let Some(thread) = self.thread.take() else {
            return ClockWindow::default();
        };
        self.stop.store(true, Ordering::Release);
        thread.thread().unpark();
        thread.join().unwrap_or_else(|_| ClockWindow {
            samples: Vec::new(),
            error: Some("the clock sampler's thread panicked".into()),
        })
    }
}

impl Drop for ClockSampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn sample(sm_mhz: u32, power_mw: u32, reasons: u64) -> ClockSample {
        ClockSample {
            sm_mhz,
            power_mw,
            reasons,
            energy_mj: None,
        }
    }

    #[test]
    fn stats_sum_up_the_samples() {
        let s = [
            sample(1980, 300_000, 0),
            sample(1530, 700_000, 0x4),
            sample(1650, 699_000, 0x4 | 0x1),
            sample(1800, 650_000, 0x20),
        ];
        let st = ClockStats::of(&s, 700_000).unwrap();
        assert_eq!(st.samples, 4);
        assert!((st.sm_mhz_mean - 1740.0).abs() < 1e-9, "{st:?}");
        assert_eq!((st.sm_mhz_min, st.sm_mhz_max), (1530, 1980));
        assert!((st.power_w_mean - 587.25).abs() < 1e-9, "{st:?}");
        assert!((st.power_w_max - 700.0).abs() < 1e-9);
        assert!((st.power_limit_w - 700.0).abs() < 1e-9);
        assert!((st.power_capped_share - 0.5).abs() < 1e-12);
        assert!((st.thermal_share - 0.25).abs() < 1e-12);
        assert_eq!(st.energy_j, None, "no counter");
        assert_eq!(
            st.summary(),
            "SM 1740 MHz mean (1530-1980), 587 of 700 W; power-capped in 50 % of 4 samples, \
             thermal in 25 %"
        );
        // The energy is the counter's difference from the first sample to the last.
        let with = |mj| ClockSample {
            energy_mj: mj,
            ..sample(1500, 600_000, 0x4)
        };
        let e = ClockStats::of(
            &[with(Some(10_000)), with(None), with(Some(52_500))],
            700_000,
        );
        let e = e.unwrap();
        assert!((e.energy_j.unwrap() - 42.5).abs() < 1e-9, "{e:?}");
        assert!(e
            .summary()
            .ends_with("; power-capped in 100 % of 3 samples; 42.5 J"));
        let half = ClockStats::of(&[with(Some(1)), with(None)], 0).unwrap();
        assert_eq!(half.energy_j, None, "no counter at the last sample");
        let still = ClockStats::of(&[with(Some(7_000)), with(Some(7_000))], 0).unwrap();
        assert_eq!(
            still.energy_j, None,
            "a counter that did not move resolves nothing"
        );
        assert!(!still.summary().contains(" J"), "{}", still.summary());
        // The hardware power brake counts as power; idle (0x1) as neither.
        let brake = ClockStats::of(&[sample(1000, 1, 0x80), sample(1000, 1, 0x1)], 0).unwrap();
        assert!((brake.power_capped_share - 0.5).abs() < 1e-12);
        assert_eq!(brake.thermal_share, 0.0);
        assert!(brake
            .summary()
            .ends_with(" W; power-capped in 50 % of 2 samples"));
    }

    #[test]
    fn no_samples_no_stats() {
        assert_eq!(ClockStats::of(&[], 700_000), None);
    }

    #[test]
    fn the_sampler_samples_both_ends_and_stops() {
        let n = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&n);
        // A period far longer than the test: only the two ends sample.
        let sampler = ClockSampler::start(
            move || Ok(sample(1000 + counter.fetch_add(1, Ordering::SeqCst), 1, 0)),
            Duration::from_secs(3600),
        );
        let w = sampler.finish();
        assert_eq!(w.error, None);
        let samples = w.samples;
        assert!(samples.len() >= 2, "{samples:?}");
        assert_eq!(samples.len() as u32, n.load(Ordering::SeqCst));
        // In order, one per call.
        for (i, s) in samples.iter().enumerate() {
            assert_eq!(s.sm_mhz, 1000 + i as u32);
        }
    }

    #[test]
    fn a_dropped_sampler_stops_its_thread() {
        let (sampled, samples) = std::sync::mpsc::channel();
        let sampler = ClockSampler::start(
            move || {
                // Err once the receiver is gone: the sampling ends either way.
                sampled.send(()).map_err(|e| e.to_string())?;
                Ok(sample(1, 1, 0))
            },
            Duration::from_secs(3600),
        );
        samples.recv_timeout(Duration::from_secs(60)).unwrap();
        drop(sampler);
        // The drop joined the thread: its last sample came before it ended
        // (more only if the long wait woke spuriously), nothing after.
        assert!(samples.try_iter().count() >= 1);
        assert!(samples.recv_timeout(Duration::from_millis(50)).is_err());
    }

    #[test]
    fn a_failing_source_ends_the_window_with_what_it_had() {
        let mut calls = 0;
        let (failed, on_failure) = std::sync::mpsc::channel();
        let sampler = ClockSampler::start(
            move || {
                calls += 1;
                if calls <= 3 {
                    Ok(sample(calls, 0, 0))
                } else {
                    failed.send(()).unwrap();
                    Err("gone".into())
                }
            },
            Duration::from_millis(1),
        );
        // The source fails on its fourth call; finish after that.
        on_failure.recv_timeout(Duration::from_secs(60)).unwrap();
        let w = sampler.finish();
        assert_eq!(
            w.samples.iter().map(|s| s.sm_mhz).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(w.error.as_deref(), Some("gone"));
    }
}
