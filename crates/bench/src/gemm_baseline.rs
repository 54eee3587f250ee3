//! The square f32 GEMM measured with the same `gemm` library the CPU
//! attention uses, on the same thread pool: the yardstick of the CPU bars.
//!
//! The bench runs it interleaved with the attention arms (once per measured
//! round), so load from other processes on a shared machine hits the
//! yardstick and the arms alike.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Default edge of the square GEMM (`n × n · n × n`).
pub const DEFAULT_GEMM_SIZE: usize = 2048;

/// The summary of the yardstick's runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GemmBaseline {
    pub n: usize,
    pub threads: usize,
    pub runs: usize,
    pub median_ms: f64,
    /// `2 n³ / median`, in 1e9 FLOP/s.
    pub gflops: f64,
}

/// An `n × n` f32 GEMM with its operands allocated once.
pub struct SquareGemm {
    n: usize,
    threads: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl SquareGemm {
    /// Host bytes of the three `n × n` f32 operands (`None` on overflow).
    pub fn bytes_needed(n: usize) -> Option<u64> {
        (n as u64).checked_mul(n as u64)?.checked_mul(3 * 4)
    }

    /// [`SquareGemm::new`] after checking `n`: at least 1, and its operands
    /// within `available` bytes (when known). The error names `--gemm-baseline`.
    pub fn try_new(n: usize, available: Option<u64>) -> Result<Self, String> {
        if n == 0 {
            return Err("--gemm-baseline 0: the GEMM edge must be at least 1".into());
        }
        match (Self::bytes_needed(n), available) {
            (None, _) => Err(format!("--gemm-baseline {n}: the operand sizes overflow")),
            (Some(b), Some(a)) if b > a => Err(format!(
                "--gemm-baseline {n} needs {b} bytes ({:.1} GiB) for its operands; {a} bytes are available",
                b as f64 / (1u64 << 30) as f64
            )),
            _ => Ok(Self::new(n)),
        }
    }

    /// Random operands; runs on all threads of the current rayon pool.
    pub fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(0x6e6d);
        let mut gen =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0..1.0)).collect() };
        SquareGemm {
            n,
            threads: rayon::current_num_threads(),
            a: gen(n * n),
            b: gen(n * n),
            c: vec![0.0; n * n],
        }
    }

    /// One GEMM; elapsed ms.
    pub fn time_once(&mut self) -> f64 {
        let n = self.n;
        let t = Instant::now();
        // SAFETY: a, b and c each hold n*n elements, row-major with row stride n.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                self.c.as_mut_ptr(),
                1,
                n as isize,
                false,
                self.a.as_ptr(),
                1,
                n as isize,
                self.b.as_ptr(),
                1,
                n as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(self.threads),
            );
        }
        t.elapsed().as_secs_f64() * 1e3
    }

    /// The median of `times` (ms of this GEMM) as a rate.
    pub fn summary(&self, times: &[f64]) -> GemmBaseline {
        let mut t = times.to_vec();
        let median_ms = crate::attention::median(&mut t);
        GemmBaseline {
            n: self.n,
            threads: self.threads,
            runs: times.len(),
            median_ms,
            gflops: 2.0 * (self.n as f64).powi(3) / (median_ms * 1e-3) / 1e9,
        }
    }
}

/// Standalone: one warm-up, then `iterations` timed GEMMs.
pub fn square_f32(n: usize, iterations: usize) -> GemmBaseline {
    let mut g = SquareGemm::new(n);
    g.time_once();
    let times: Vec<f64> = (0..iterations.max(1)).map(|_| g.time_once()).collect();
    g.summary(&times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplies_and_measures_a_positive_rate() {
        let mut g = SquareGemm::new(32);
        g.time_once();
        // c = a · b, checked on one element against a plain dot product.
        let want: f32 = (0..32).map(|k| g.a[5 * 32 + k] * g.b[k * 32 + 7]).sum();
        assert!((g.c[5 * 32 + 7] - want).abs() < 1e-4);
        for (n, want) in [
            (0, "at least 1"),
            (usize::MAX, "overflow"),
            (1 << 20, "available"),
        ] {
            let err = SquareGemm::try_new(n, Some(1 << 30)).err().unwrap();
            assert!(
                err.contains("--gemm-baseline") && err.contains(want),
                "{err}"
            );
        }
        let s = square_f32(64, 2);
        assert_eq!((s.n, s.runs), (64, 2));
        assert!(s.median_ms > 0.0 && s.gflops.is_finite() && s.gflops > 0.0);
    }
}
