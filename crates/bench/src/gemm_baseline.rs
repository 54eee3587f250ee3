//! The square f32 GEMM measured with the same `gemm` library the CPU
//! attention uses, on the same thread pool: the yardstick of the CPU bars.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Default edge of the square GEMM (`n × n · n × n`).
pub const DEFAULT_GEMM_SIZE: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GemmBaseline {
    pub n: usize,
    pub threads: usize,
    pub median_ms: f64,
    /// `2 n³ / median`, in 1e9 FLOP/s.
    pub gflops: f64,
}

/// Times `iterations` (after one warm-up) `n × n` f32 GEMMs on all threads of
/// the current rayon pool; the median decides.
pub fn square_f32(n: usize, iterations: usize) -> GemmBaseline {
    let mut rng = StdRng::seed_from_u64(0x6e6d);
    let a: Vec<f32> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut c = vec![0.0f32; n * n];
    let threads = rayon::current_num_threads();
    let mut times = Vec::with_capacity(iterations);
    for i in 0..=iterations.max(1) {
        let t = Instant::now();
        // SAFETY: a, b and c each hold n*n elements, row-major with row stride n.
        unsafe {
            gemm::gemm(
                n,
                n,
                n,
                c.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                1,
                n as isize,
                b.as_ptr(),
                1,
                n as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            );
        }
        if i > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let median_ms = crate::attention::median(&mut times);
    GemmBaseline {
        n,
        threads,
        median_ms,
        gflops: 2.0 * (n as f64).powi(3) / (median_ms * 1e-3) / 1e9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_positive_rate() {
        let g = square_f32(64, 2);
        assert_eq!(g.n, 64);
        assert!(g.median_ms > 0.0 && g.gflops.is_finite() && g.gflops > 0.0);
    }
}
