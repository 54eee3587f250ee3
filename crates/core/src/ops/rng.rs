//! Counter-based random numbers shared by every backend, so a draw depends
//! only on `(seed, counter)` — never on thread layout or device.
//!
//! `mix64` is SplitMix64's finaliser. Sampling draws one uniform per
//! `(seed, step)`; synthetic weights draw element `i` of a matrix from
//! `(seed, i)` by Box–Muller over two 24-bit uniforms.

/// SplitMix64 finaliser of `x`.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The 64 random bits of `(seed, counter)`.
pub fn bits(seed: u64, counter: u64) -> u64 {
    mix64(mix64(seed) ^ counter)
}

/// A uniform in `[0, 1)` with 53 random bits, from `(seed, counter)`.
pub fn uniform(seed: u64, counter: u64) -> f64 {
    (bits(seed, counter) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A standard normal from `(seed, counter)`: Box–Muller over the high and
/// low 24-bit halves of one draw, computed in f32 (the same formula on
/// every backend).
pub fn normal(seed: u64, counter: u64) -> f32 {
    let r = bits(seed, counter);
    let u1 = ((r >> 40) as f32 + 1.0) * (1.0 / 16_777_216.0); // (0, 1]
    let u2 = ((r & 0xFF_FFFF) as f32) * (1.0 / 16_777_216.0); // [0, 1)
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_in_range_and_deterministic() {
        let xs: Vec<f64> = (0..10_000).map(|i| uniform(7, i)).collect();
        assert!(xs.iter().all(|&x| (0.0..1.0).contains(&x)));
        assert_eq!(uniform(7, 3), xs[3]);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        assert_ne!(uniform(8, 3), xs[3], "seed changes the stream");
    }

    #[test]
    fn normal_has_unit_moments() {
        let n = 100_000u64;
        let xs: Vec<f64> = (0..n).map(|i| normal(11, i) as f64).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "var {var}");
        assert!(xs.iter().all(|x| x.is_finite()));
    }
}
