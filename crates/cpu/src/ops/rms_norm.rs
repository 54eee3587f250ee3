//! The two RMSNorms of Qwen3.5, exactly as transformers defines them.
//!
//! * [`rms_norm_offset`] — `Qwen3_5RMSNorm` / `Qwen3_5MoeRMSNorm` (decoder
//!   norms, final norm, per-head q/k norms): the weight is zero-centred and
//!   applied as `x̂ · (1 + w)`, `x̂ = x / sqrt(mean(x²) + eps)`.
//! * [`rms_norm_gated`] — `Qwen3_5RMSNormGated` (Gated DeltaNet output): the
//!   weight is applied as is and the result gated by `silu(z)`:
//!   `w · x̂ · silu(z)`.

use super::activation::silu;

fn inv_rms(row: &[f32], eps: f32) -> f32 {
    let ss: f64 = row.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let mean = (ss / row.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// In place over rows of `weight.len()`: `x = x̂ · (1 + w)`.
pub fn rms_norm_offset(x: &mut [f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    assert_eq!(x.len() % d, 0, "rms_norm: length not a multiple of the row");
    for row in x.chunks_exact_mut(d) {
        let r = inv_rms(row, eps);
        for (v, w) in row.iter_mut().zip(weight) {
            *v = (*v * r) * (1.0 + w);
        }
    }
}

/// In place over rows of `weight.len()`: `x = w · x̂ · silu(z)`.
pub fn rms_norm_gated(x: &mut [f32], z: &[f32], weight: &[f32], eps: f32) {
    let d = weight.len();
    assert_eq!(x.len(), z.len());
    assert_eq!(
        x.len() % d,
        0,
        "rms_norm_gated: length not a multiple of the row"
    );
    for (row, zr) in x.chunks_exact_mut(d).zip(z.chunks_exact(d)) {
        let r = inv_rms(row, eps);
        for ((v, w), zv) in row.iter_mut().zip(weight).zip(zr) {
            *v = w * (*v * r) * silu(*zv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{rel_err, rng, uniform};

    fn reference(x: &[f32], w: &[f32], z: Option<&[f32]>, eps: f64) -> Vec<f64> {
        let d = w.len();
        let mut out = Vec::new();
        for (r, row) in x.chunks(d).enumerate() {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            for (i, &v) in row.iter().enumerate() {
                let xh = v as f64 * inv;
                out.push(match z {
                    None => xh * (1.0 + w[i] as f64),
                    Some(z) => {
                        let zv = z[r * d + i] as f64;
                        w[i] as f64 * xh * zv / (1.0 + (-zv).exp())
                    }
                });
            }
        }
        out
    }

    #[test]
    fn offset_norm_applies_one_plus_weight() {
        let mut g = rng(1);
        for d in [7, 64, 256] {
            let x = uniform(&mut g, 5 * d, 3.0);
            let w = uniform(&mut g, d, 0.5);
            let mut y = x.clone();
            rms_norm_offset(&mut y, &w, 1e-6);
            assert!(rel_err(&y, &reference(&x, &w, None, 1e-6)) < 1e-6);
        }
        // Zero weight is the identity scale (x̂), not zero.
        let mut y = vec![3.0f32, 4.0];
        rms_norm_offset(&mut y, &[0.0, 0.0], 0.0);
        let s = (12.5f32).sqrt();
        assert!((y[0] - 3.0 / s).abs() < 1e-6 && (y[1] - 4.0 / s).abs() < 1e-6);
    }

    #[test]
    fn gated_norm_applies_weight_and_silu_gate() {
        let mut g = rng(2);
        let d = 16;
        let x = uniform(&mut g, 9 * d, 2.0);
        let z = uniform(&mut g, 9 * d, 4.0);
        let w = uniform(&mut g, d, 1.5);
        let mut y = x.clone();
        rms_norm_gated(&mut y, &z, &w, 1e-6);
        assert!(rel_err(&y, &reference(&x, &w, Some(&z), 1e-6)) < 1e-6);
    }

    #[test]
    fn nan_poisons_only_its_row() {
        let mut y = vec![1.0f32, f32::NAN, 2.0, 3.0];
        rms_norm_offset(&mut y, &[0.1, 0.2], 1e-6);
        assert!(y[0].is_nan() && y[1].is_nan());
        assert!(y[2].is_finite() && y[3].is_finite());
    }
}
