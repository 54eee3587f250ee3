//! The MLP of a decoder layer: dense SwiGLU (`Qwen3_5MLP`) or the sparse
//! MoE block (`Qwen3_5MoeSparseMoeBlock`: router softmax → top-k →
//! SwiGLU experts weighted by their routing weight, plus the shared expert
//! scaled by `sigmoid(shared_expert_gate·x)`).
//!
//! Tokens are grouped by expert so each expert runs one GEMM per projection;
//! experts run in parallel (each GEMM on one thread).

use crate::ops::activation::{sigmoid, swiglu};
use crate::ops::moe::route;
use crate::ops::{linear, linear_seq, WeightView};
use rayon::prelude::*;

/// `down · (silu(gate·x) ⊙ up·x)`.
#[derive(Debug, Clone)]
pub struct SwiGlu<'w> {
    pub gate: WeightView<'w>,
    pub up: WeightView<'w>,
    pub down: WeightView<'w>,
}

impl SwiGlu<'_> {
    /// `x`: `[t][hidden]` → `[t][hidden]`. `parallel` lets the GEMMs use every thread.
    pub fn forward(&self, x: &[f32], t: usize, parallel: bool) -> Vec<f32> {
        let mm = if parallel { linear } else { linear_seq };
        let inter = self.gate.rows;
        let mut g = vec![0.0f32; t * inter];
        let mut u = vec![0.0f32; t * inter];
        mm(x, t, self.gate, &mut g);
        mm(x, t, self.up, &mut u);
        swiglu(&mut g, &u);
        let mut out = vec![0.0f32; t * self.down.rows];
        mm(&g, t, self.down, &mut out);
        out
    }
}

/// Sparse MoE with a shared expert. Expert `e`'s gate and up projections are
/// rows `e*2I .. e*2I+I` and `e*2I+I .. (e+1)*2I` of `gate_up` (`[E*2I, H]`),
/// its down projection rows `e*H .. (e+1)*H` of `down` (`[E*H, I]`).
#[derive(Debug, Clone)]
pub struct SparseMoe<'w> {
    pub router: WeightView<'w>,
    pub gate_up: WeightView<'w>,
    pub down: WeightView<'w>,
    pub num_experts: usize,
    pub top_k: usize,
    pub intermediate: usize,
    pub renormalise: bool,
    pub shared: SwiGlu<'w>,
    pub shared_gate: WeightView<'w>,
}

impl SparseMoe<'_> {
    /// `x`: `[t][hidden]` → `[t][hidden]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let hidden = self.router.cols;
        let inter = self.intermediate;
        let mut out = self.shared.forward(x, t, true);
        let mut sg = vec![0.0f32; t];
        linear(x, t, self.shared_gate, &mut sg);
        for (row, g) in out.chunks_exact_mut(hidden).zip(&sg) {
            let s = sigmoid(*g);
            row.iter_mut().for_each(|v| *v *= s);
        }
        let mut logits = vec![0.0f32; t * self.num_experts];
        linear(x, t, self.router, &mut logits);
        let routing = route(&logits, self.num_experts, self.top_k, self.renormalise);
        let groups = routing.by_expert(self.num_experts);
        let results: Vec<(usize, Vec<f32>)> = groups
            .par_iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .map(|(e, group)| {
                let n = group.len();
                let mut xe = Vec::with_capacity(n * hidden);
                for &(tok, _) in group {
                    xe.extend_from_slice(&x[tok * hidden..(tok + 1) * hidden]);
                }
                let mut g = vec![0.0f32; n * inter];
                let mut u = vec![0.0f32; n * inter];
                linear_seq(&xe, n, self.gate_up.sub_rows(e * 2 * inter, inter), &mut g);
                linear_seq(
                    &xe,
                    n,
                    self.gate_up.sub_rows(e * 2 * inter + inter, inter),
                    &mut u,
                );
                swiglu(&mut g, &u);
                let mut y = vec![0.0f32; n * hidden];
                linear_seq(&g, n, self.down.sub_rows(e * hidden, hidden), &mut y);
                for (row, &(_, w)) in y.chunks_exact_mut(hidden).zip(group) {
                    row.iter_mut().for_each(|v| *v *= w);
                }
                (e, y)
            })
            .collect();
        let mut experts_sum = vec![0.0f32; t * hidden];
        for (e, y) in results {
            for (row, &(tok, _)) in y.chunks_exact(hidden).zip(&groups[e]) {
                for (o, v) in experts_sum[tok * hidden..(tok + 1) * hidden]
                    .iter_mut()
                    .zip(row)
                {
                    *o += v;
                }
            }
        }
        for (o, e) in out.iter_mut().zip(&experts_sum) {
            *o += e;
        }
        out
    }
}

/// The MLP of one decoder layer.
#[derive(Debug, Clone)]
pub enum Mlp<'w> {
    Dense(SwiGlu<'w>),
    Moe(SparseMoe<'w>),
}

impl Mlp<'_> {
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        match self {
            Mlp::Dense(m) => m.forward(x, t, true),
            Mlp::Moe(m) => m.forward(x, t),
        }
    }
}
