//! Precision of the CPU backend: f32 (the reference every backend is tested
//! against) or an emulation of the CUDA backend's bf16 storage, for studying
//! bf16 error without a GPU.
//!
//! [`Precision::bf16_matrices`] rounds every matrix to bf16 on upload (the
//! CUDA backend stores matrices so; vectors — norms, `A_log`, `dt_bias`, the
//! conv weight — stay f32 there and here). [`ActRounding`] names each place
//! where `crates/cuda/src/backend` stores an activation in bf16; with a site
//! on, the CPU op rounds its f32 result to bf16 (round to nearest even, as
//! `__float2bfloat16`) exactly there, the math staying f32. What CUDA keeps
//! in f32 is never rounded: router logits, the shared-expert gate logit,
//! `g` / `beta`, the GDN recurrent state, the routed experts' weighted sum.
//!
//! The sites, and the CUDA code they mirror:
//! * [`ActRounding::RESIDUAL`] — the residual stream (`add_rms_norm` stores
//!   `bf16(r + delta)`, `ops_norm.cu`; `embed` writes bf16 rows);
//! * [`ActRounding::NORM`] — the normed rows `add_rms_norm` returns;
//! * [`ActRounding::LINEAR`] — every `linear` output (cuBLAS, bf16 out),
//!   the LM head's logits included;
//! * [`ActRounding::ATTENTION`] — q/k norm, RoPE, the attention output and
//!   its sigmoid gate (`rms_norm_groups`, `rope`, `attention`, `mul_sigmoid`);
//! * [`ActRounding::GDN`] — conv1d + SiLU, the delta rule's output, the
//!   gated norm;
//! * [`ActRounding::MLP`] — SwiGLU, and inside `moe` what the CUDA fallback
//!   experts store in bf16 (gate and up products, `silu · up`) and the
//!   shared expert's products;
//! * [`ActRounding::MOE_OUT`] — the MoE block's output (`moe_combine_bf16`);
//! * [`ActRounding::ATTENTION_P`] — the softmax probabilities inside
//!   attention, rounded before `P · V` (both CUDA routes multiply bf16
//!   probabilities by V; emulated as the composed route does it: the
//!   normalised row rounded, f32 scores, softmax and accumulation);
//! * [`ActRounding::ROUTER_INPUT`] — the MoE router reads the bf16 normed
//!   rows (as CUDA does). Without it (and with [`ActRounding::NORM`]) the
//!   router reads the normed rows before their rounding — a what-if: CUDA
//!   would need an f32 copy of the MoE layers' normed rows.
//!
//! Not emulated: rounding inside the chunked GDN kernel of head dim 128 and
//! the grouped-GEMM experts (the fixtures run the recurrent and per-expert
//! fallbacks), and the fused route's unnormalised bf16 probabilities.

use half::bf16;

/// Where activations are rounded to bf16 (a set of sites).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ActRounding(u32);

impl ActRounding {
    /// Nothing rounded: f32 activations.
    pub const NONE: ActRounding = ActRounding(0);
    pub const RESIDUAL: ActRounding = ActRounding(1);
    pub const NORM: ActRounding = ActRounding(1 << 1);
    pub const LINEAR: ActRounding = ActRounding(1 << 2);
    pub const ATTENTION: ActRounding = ActRounding(1 << 3);
    pub const GDN: ActRounding = ActRounding(1 << 4);
    pub const MLP: ActRounding = ActRounding(1 << 5);
    pub const MOE_OUT: ActRounding = ActRounding(1 << 6);
    pub const ATTENTION_P: ActRounding = ActRounding(1 << 7);
    pub const ROUTER_INPUT: ActRounding = ActRounding(1 << 8);
    /// Every site: the CUDA backend's storage.
    pub const ALL: ActRounding = ActRounding((1 << 9) - 1);

    /// Each named site, for studies that turn them off one at a time.
    pub const SITES: [(&'static str, ActRounding); 9] = [
        ("residual", ActRounding::RESIDUAL),
        ("norm", ActRounding::NORM),
        ("linear", ActRounding::LINEAR),
        ("attention", ActRounding::ATTENTION),
        ("gdn", ActRounding::GDN),
        ("mlp", ActRounding::MLP),
        ("moe_out", ActRounding::MOE_OUT),
        ("attention_p", ActRounding::ATTENTION_P),
        ("router_input", ActRounding::ROUTER_INPUT),
    ];

    pub const fn contains(self, site: ActRounding) -> bool {
        self.0 & site.0 == site.0
    }

    pub const fn with(self, site: ActRounding) -> ActRounding {
        ActRounding(self.0 | site.0)
    }

    pub const fn without(self, site: ActRounding) -> ActRounding {
        ActRounding(self.0 & !site.0)
    }

    /// Rounds `x` to bf16 in place when `site` is in this set.
    pub fn apply(self, site: ActRounding, x: &mut [f32]) {
        if self.contains(site) {
            round_bf16(x);
        }
    }
}

/// Rounds every value to the nearest bf16 (ties to even; NaN stays NaN).
pub fn round_bf16(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = bf16::from_f32(*v).to_f32());
}

/// The precision a [`crate::CpuBackend`] computes in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Precision {
    /// Matrices rounded to bf16 on upload (vectors stay f32).
    pub bf16_matrices: bool,
    /// Activation sites rounded to bf16.
    pub act: ActRounding,
}

impl Precision {
    /// f32 everything, weights as given: the reference.
    pub const F32: Precision = Precision {
        bf16_matrices: false,
        act: ActRounding::NONE,
    };
    /// f32 math and activations on the weights as the CUDA backend stores
    /// them (matrices bf16): the baseline of the CUDA parity bar.
    pub const BF16_WEIGHTS: Precision = Precision {
        bf16_matrices: true,
        act: ActRounding::NONE,
    };

    /// bf16 matrices and activations rounded at `act`.
    pub const fn bf16(act: ActRounding) -> Precision {
        Precision {
            bf16_matrices: true,
            act,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_nearest_even_and_keeps_nan() {
        // 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even (1.0).
        let mut x = [
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
            f32::NAN,
            -0.0,
        ];
        round_bf16(&mut x);
        assert_eq!(x[0], 1.0);
        assert_eq!(x[1], 1.0 + 2f32.powi(-6));
        assert!(x[2].is_nan());
        assert_eq!(x[3].to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn sites_compose() {
        let s = ActRounding::ALL.without(ActRounding::RESIDUAL);
        assert!(!s.contains(ActRounding::RESIDUAL));
        assert!(s.contains(ActRounding::NORM) && s.contains(ActRounding::MOE_OUT));
        assert_eq!(s.with(ActRounding::RESIDUAL), ActRounding::ALL);
        let all = ActRounding::SITES
            .iter()
            .fold(ActRounding::NONE, |a, (_, s)| a.with(*s));
        assert_eq!(all, ActRounding::ALL);
        let mut v = [1.0 + 2f32.powi(-10)];
        ActRounding::NONE.apply(ActRounding::LINEAR, &mut v);
        assert_eq!(v[0], 1.0 + 2f32.powi(-10));
        s.apply(ActRounding::LINEAR, &mut v);
        assert_eq!(v[0], 1.0);
    }
}
