//! Scalar activations exactly as torch defines them.

/// `x * sigmoid(x)`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `1 / (1 + exp(-x))`.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// torch's `softplus` (beta 1, threshold 20): `x` above 20, else `ln(1 + e^x)`.
#[inline]
pub fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// SwiGLU in place: `gate[i] = silu(gate[i]) * up[i]`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len());
    for (g, u) in gate.iter_mut().zip(up) {
        *g = silu(*g) * u;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_match_f64_definitions() {
        for &x in &[-30.0f32, -5.0, -0.3, 0.0, 0.7, 4.0, 19.9, 25.0] {
            let xd = x as f64;
            let sig = 1.0 / (1.0 + (-xd).exp());
            assert!((sigmoid(x) as f64 - sig).abs() < 1e-6, "sigmoid {x}");
            assert!(
                (silu(x) as f64 - xd * sig).abs() < 1e-5 * (1.0 + xd.abs()),
                "silu {x}"
            );
            let sp = if xd > 20.0 { xd } else { xd.exp().ln_1p() };
            assert!(
                (softplus(x) as f64 - sp).abs() < 1e-5 * (1.0 + sp),
                "softplus {x}"
            );
        }
        assert!(silu(f32::NAN).is_nan() && softplus(f32::NAN).is_nan());
    }

    #[test]
    fn swiglu_multiplies_silu_gate_by_up() {
        let mut g = vec![1.0f32, -2.0, 0.5];
        swiglu(&mut g, &[2.0, 3.0, -1.0]);
        let want = [silu(1.0) * 2.0, silu(-2.0) * 3.0, -silu(0.5)];
        assert_eq!(g, want);
    }
}
