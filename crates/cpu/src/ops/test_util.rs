//! Helpers shared by the op tests: seeded random inputs and error measures.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` values uniform in `[-scale, scale)`.
pub fn uniform(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

/// Relative Frobenius error `|a - b| / |b|` with `b` the f64 reference.
pub fn rel_err(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let mut num = 0.0;
    let mut den = 0.0;
    for (x, y) in a.iter().zip(b) {
        num += (*x as f64 - y).powi(2);
        den += y * y;
    }
    (num / den.max(1e-300)).sqrt()
}
