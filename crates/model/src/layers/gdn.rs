//! The Gated DeltaNet layer (`Qwen3_5GatedDeltaNet`) with its carried state.
//!
//! `in_proj_qkv` → causal depthwise conv1d + SiLU (state: the last
//! `kernel - 1` rows) → split into q, k, v heads; `β = sigmoid(in_proj_b·x)`,
//! `g = -exp(A_log) · softplus(in_proj_a·x + dt_bias)`; the gated delta rule
//! (recurrent state `[v_heads][d_k][d_v]`); gated RMSNorm with
//! `z = in_proj_z·x` per value head; `out_proj`.

use crate::ops::activation::{sigmoid, softplus};
use crate::ops::conv1d::causal_conv1d_silu;
use crate::ops::gated_delta::{gated_delta_rule, DeltaDims};
use crate::ops::rms_norm::rms_norm_gated;
use crate::ops::{linear, WeightView};

/// One linear-attention layer's weights and shape.
#[derive(Debug, Clone)]
pub struct GatedDeltaNet<'w> {
    pub in_proj_qkv: WeightView<'w>,
    pub in_proj_z: WeightView<'w>,
    pub in_proj_b: WeightView<'w>,
    pub in_proj_a: WeightView<'w>,
    pub out_proj: WeightView<'w>,
    /// `[conv_dim][kernel]`.
    pub conv_weight: Vec<f32>,
    pub kernel: usize,
    pub a_log: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// Gated RMSNorm weight `[v_dim]`.
    pub norm: Vec<f32>,
    pub dims: DeltaDims,
    pub eps: f32,
}

/// The conv state `[kernel-1][conv_dim]` and recurrent state `[v_heads][d_k][d_v]`.
#[derive(Debug, Clone, PartialEq)]
pub struct GdnState {
    pub conv: Vec<f32>,
    pub recurrent: Vec<f32>,
}

impl GatedDeltaNet<'_> {
    fn key_dim(&self) -> usize {
        self.dims.k_heads * self.dims.k_dim
    }

    fn value_dim(&self) -> usize {
        self.dims.v_heads * self.dims.v_dim
    }

    fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// A zero state (the state before the first token).
    pub fn new_state(&self) -> GdnState {
        GdnState {
            conv: vec![0.0; (self.kernel - 1) * self.conv_dim()],
            recurrent: vec![0.0; self.dims.state_len()],
        }
    }

    /// Runs `t` tokens (`x`: `[t][hidden]`), advancing `state`; returns `[t][hidden]`.
    pub fn forward(&self, x: &[f32], t: usize, state: &mut GdnState) -> Vec<f32> {
        let (kd, vd, cd) = (self.key_dim(), self.value_dim(), self.conv_dim());
        let nv = self.dims.v_heads;
        let mut mixed = vec![0.0f32; t * cd];
        linear(x, t, self.in_proj_qkv, &mut mixed);
        let mut conv = vec![0.0f32; t * cd];
        causal_conv1d_silu(
            &mixed,
            cd,
            &self.conv_weight,
            self.kernel,
            &mut state.conv,
            &mut conv,
        );
        let mut q = Vec::with_capacity(t * kd);
        let mut k = Vec::with_capacity(t * kd);
        let mut v = Vec::with_capacity(t * vd);
        for row in conv.chunks_exact(cd) {
            q.extend_from_slice(&row[..kd]);
            k.extend_from_slice(&row[kd..2 * kd]);
            v.extend_from_slice(&row[2 * kd..]);
        }
        let mut z = vec![0.0f32; t * vd];
        let mut b = vec![0.0f32; t * nv];
        let mut a = vec![0.0f32; t * nv];
        linear(x, t, self.in_proj_z, &mut z);
        linear(x, t, self.in_proj_b, &mut b);
        linear(x, t, self.in_proj_a, &mut a);
        let beta: Vec<f32> = b.iter().map(|&bv| sigmoid(bv)).collect();
        let g: Vec<f32> = a
            .chunks_exact(nv)
            .flat_map(|row| {
                row.iter()
                    .enumerate()
                    .map(|(h, &av)| -self.a_log[h].exp() * softplus(av + self.dt_bias[h]))
            })
            .collect();
        let mut core = vec![f32::NAN; t * vd];
        gated_delta_rule(
            self.dims,
            &q,
            &k,
            &v,
            &g,
            &beta,
            &mut state.recurrent,
            &mut core,
        );
        rms_norm_gated(&mut core, &z, &self.norm, self.eps);
        let mut out = vec![0.0f32; t * self.out_proj.rows];
        linear(&core, t, self.out_proj, &mut out);
        out
    }
}
