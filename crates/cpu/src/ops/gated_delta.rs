//! The gated delta rule of Gated DeltaNet, recurrent form, with the state
//! carried across calls.
//!
//! Follows transformers' `torch_recurrent_gated_delta_rule` (which its
//! chunked form `torch_chunk_gated_delta_rule` computes exactly, up to
//! rounding) with `use_qk_l2norm_in_kernel=True`:
//!
//! * q and k are L2-normalised per head (`x / sqrt(Σx² + 1e-6)`), then q is
//!   scaled by `1 / sqrt(d_k)`;
//! * value head `h` reads key head `h / (v_heads / k_heads)` (repeat_interleave);
//! * per token, per value head, with state `S [d_k][d_v]`:
//!   `S *= exp(g)`; `delta = (v - Sᵀk) · β`; `S += k ⊗ delta`; `o = Sᵀq`.
//!
//! The decay `g = -exp(A_log) · softplus(a + dt_bias)` and `β = sigmoid(b)`
//! are computed by the layer.

use rayon::prelude::*;

/// Head counts and dims of one Gated DeltaNet layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaDims {
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

impl DeltaDims {
    /// Elements of the recurrent state `[v_heads][k_dim][v_dim]`.
    pub fn state_len(&self) -> usize {
        self.v_heads * self.k_dim * self.v_dim
    }
}

const L2_EPS: f32 = 1e-6;

fn l2_normalise(rows: &mut [f32], d: usize, scale: f32) {
    for r in rows.chunks_exact_mut(d) {
        let ss: f32 = r.iter().map(|v| v * v).sum();
        let inv = 1.0 / (ss + L2_EPS).sqrt() * scale;
        for v in r.iter_mut() {
            *v *= inv;
        }
    }
}

/// What one value head reads (token-major inputs, q and k normalised).
struct HeadInputs<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    g: &'a [f32],
    beta: &'a [f32],
    head: usize,
    k_head: usize,
    dims: DeltaDims,
}

/// One value head over every token: the AVX2 build of the same loops when
/// the CPU has it (element-wise along `v_dim`, so results are identical).
fn run_head(inp: &HeadInputs<'_>, s: &mut [f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        unsafe { head_avx2(inp, s, out) };
        return;
    }
    head_loop(inp, s, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn head_avx2(inp: &HeadInputs<'_>, s: &mut [f32], out: &mut [f32]) {
    head_loop(inp, s, out)
}

#[inline(always)]
fn head_loop(inp: &HeadInputs<'_>, s: &mut [f32], o_head: &mut [f32]) {
    let DeltaDims {
        k_heads,
        v_heads,
        k_dim,
        v_dim,
    } = inp.dims;
    let (h, kh) = (inp.head, inp.k_head);
    let t_len = inp.g.len() / v_heads;
    let q_at = |t: usize| &inp.q[(t * k_heads + kh) * k_dim..][..k_dim];
    let k_at = |t: usize| &inp.k[(t * k_heads + kh) * k_dim..][..k_dim];
    let decay_at = |t: usize| inp.g[t * v_heads + h].exp();
    // One pass over the state per token: the update and read-out of token t
    // are fused with the decay and key read of token t + 1 (the same
    // operations on each element in the same order as two separate passes).
    let mut kv_mem = vec![0.0f32; v_dim];
    let mut next_mem = vec![0.0f32; v_dim];
    let mut delta = vec![0.0f32; v_dim];
    if t_len > 0 {
        let (decay, k0) = (decay_at(0), k_at(0));
        for (row, &ki) in s.chunks_exact_mut(v_dim).zip(k0) {
            for (sv, m) in row.iter_mut().zip(kv_mem.iter_mut()) {
                *sv *= decay;
                *m += *sv * ki;
            }
        }
    }
    for t in 0..t_len {
        let (qt, kt) = (q_at(t), k_at(t));
        let vt = &inp.v[(t * v_heads + h) * v_dim..][..v_dim];
        let b = inp.beta[t * v_heads + h];
        for ((d, vv), m) in delta.iter_mut().zip(vt).zip(&kv_mem) {
            *d = (vv - m) * b;
        }
        let ot = &mut o_head[t * v_dim..(t + 1) * v_dim];
        ot.fill(0.0);
        if t + 1 < t_len {
            let (decay, kn) = (decay_at(t + 1), k_at(t + 1));
            next_mem.fill(0.0);
            for (((row, &ki), &qi), &kni) in s.chunks_exact_mut(v_dim).zip(kt).zip(qt).zip(kn) {
                for (((sv, d), o), m) in row
                    .iter_mut()
                    .zip(&delta)
                    .zip(ot.iter_mut())
                    .zip(next_mem.iter_mut())
                {
                    *sv += ki * d;
                    *o += *sv * qi;
                    *sv *= decay;
                    *m += *sv * kni;
                }
            }
            std::mem::swap(&mut kv_mem, &mut next_mem);
        } else {
            for ((row, &ki), &qi) in s.chunks_exact_mut(v_dim).zip(kt).zip(qt) {
                for ((sv, d), o) in row.iter_mut().zip(&delta).zip(ot.iter_mut()) {
                    *sv += ki * d;
                    *o += *sv * qi;
                }
            }
        }
    }
}

/// Runs `T` tokens. `q`, `k`: `[T][k_heads][k_dim]`; `v`: `[T][v_heads][v_dim]`;
/// `g`, `beta`: `[T][v_heads]`; `state`: `[v_heads][k_dim][v_dim]` (updated);
/// `out`: `[T][v_heads][v_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_rule(
    dims: DeltaDims,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &mut [f32],
    out: &mut [f32],
) {
    let DeltaDims {
        k_heads,
        v_heads,
        k_dim,
        v_dim,
    } = dims;
    assert!(
        k_heads > 0 && v_heads.is_multiple_of(k_heads),
        "v_heads must be a multiple of k_heads"
    );
    let t_len = g.len() / v_heads;
    assert_eq!(g.len(), t_len * v_heads);
    assert_eq!(beta.len(), g.len());
    assert_eq!(q.len(), t_len * k_heads * k_dim);
    assert_eq!(k.len(), q.len());
    assert_eq!(v.len(), t_len * v_heads * v_dim);
    assert_eq!(out.len(), v.len());
    assert_eq!(state.len(), dims.state_len());
    let mut qn = q.to_vec();
    let mut kn = k.to_vec();
    l2_normalise(&mut qn, k_dim, 1.0 / (k_dim as f32).sqrt());
    l2_normalise(&mut kn, k_dim, 1.0);
    let group = v_heads / k_heads;
    let mut per_head = vec![0.0f32; v_heads * t_len * v_dim];
    state
        .par_chunks_mut(k_dim * v_dim)
        .zip(per_head.par_chunks_mut((t_len * v_dim).max(1)))
        .enumerate()
        .for_each(|(h, (s, o_head))| {
            let head = HeadInputs {
                q: &qn,
                k: &kn,
                v,
                g,
                beta,
                head: h,
                k_head: h / group,
                dims,
            };
            run_head(&head, s, o_head);
        });
    for h in 0..v_heads {
        for t in 0..t_len {
            out[(t * v_heads + h) * v_dim..][..v_dim]
                .copy_from_slice(&per_head[(h * t_len + t) * v_dim..][..v_dim]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{rel_err, rng, uniform};

    /// The reference recurrence in f64, written from the transformers torch fallback.
    fn reference(
        d: DeltaDims,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        g: &[f32],
        beta: &[f32],
        state: &mut [f64],
    ) -> Vec<f64> {
        let t_len = g.len() / d.v_heads;
        let norm = |x: &[f32], scale: f64| -> Vec<f64> {
            let ss: f64 = x.iter().map(|&a| (a as f64).powi(2)).sum();
            x.iter()
                .map(|&a| a as f64 / (ss + 1e-6).sqrt() * scale)
                .collect()
        };
        let mut out = vec![0.0; v.len()];
        for t in 0..t_len {
            for h in 0..d.v_heads {
                let kh = h / (d.v_heads / d.k_heads);
                let off = (t * d.k_heads + kh) * d.k_dim;
                let qt = norm(&q[off..off + d.k_dim], 1.0 / (d.k_dim as f64).sqrt());
                let kt = norm(&k[off..off + d.k_dim], 1.0);
                let vt = &v[(t * d.v_heads + h) * d.v_dim..][..d.v_dim];
                let s = &mut state[h * d.k_dim * d.v_dim..][..d.k_dim * d.v_dim];
                let decay = (g[t * d.v_heads + h] as f64).exp();
                s.iter_mut().for_each(|x| *x *= decay);
                for j in 0..d.v_dim {
                    let mem: f64 = (0..d.k_dim).map(|i| s[i * d.v_dim + j] * kt[i]).sum();
                    let delta = (vt[j] as f64 - mem) * beta[t * d.v_heads + h] as f64;
                    for i in 0..d.k_dim {
                        s[i * d.v_dim + j] += kt[i] * delta;
                    }
                    out[(t * d.v_heads + h) * d.v_dim + j] =
                        (0..d.k_dim).map(|i| s[i * d.v_dim + j] * qt[i]).sum();
                }
            }
        }
        out
    }

    fn inputs(seed: u64, d: DeltaDims, t: usize) -> [Vec<f32>; 5] {
        let mut g = rng(seed);
        let q = uniform(&mut g, t * d.k_heads * d.k_dim, 1.0);
        let k = uniform(&mut g, t * d.k_heads * d.k_dim, 1.0);
        let v = uniform(&mut g, t * d.v_heads * d.v_dim, 2.0);
        let gate: Vec<f32> = uniform(&mut g, t * d.v_heads, 1.0)
            .iter()
            .map(|x| -x.abs() * 2.0)
            .collect();
        let beta: Vec<f32> = uniform(&mut g, t * d.v_heads, 0.5)
            .iter()
            .map(|x| x + 0.5)
            .collect();
        [q, k, v, gate, beta]
    }

    #[test]
    fn grouped_heads_match_f64_recurrence() {
        let d = DeltaDims {
            k_heads: 2,
            v_heads: 4,
            k_dim: 16,
            v_dim: 8,
        };
        let t = 37;
        let [q, k, v, gate, beta] = inputs(9, d, t);
        let mut state = vec![0.0f32; d.state_len()];
        let mut out = vec![f32::NAN; v.len()];
        gated_delta_rule(d, &q, &k, &v, &gate, &beta, &mut state, &mut out);
        let mut s64 = vec![0.0f64; d.state_len()];
        let want = reference(d, &q, &k, &v, &gate, &beta, &mut s64);
        assert!(rel_err(&out, &want) < 1e-5);
        assert!(rel_err(&state, &s64) < 1e-5);
    }

    #[test]
    fn dispatched_head_loop_equals_portable_loop_bit_for_bit() {
        let d = DeltaDims {
            k_heads: 2,
            v_heads: 4,
            k_dim: 32,
            v_dim: 24,
        };
        let t = 19;
        let [q, k, v, gate, beta] = inputs(13, d, t);
        let head = HeadInputs {
            q: &q,
            k: &k,
            v: &v,
            g: &gate,
            beta: &beta,
            head: 3,
            k_head: 1,
            dims: d,
        };
        let mut s1 = uniform(&mut rng(14), d.k_dim * d.v_dim, 0.5);
        let mut s2 = s1.clone();
        let (mut o1, mut o2) = (vec![f32::NAN; t * d.v_dim], vec![f32::NAN; t * d.v_dim]);
        run_head(&head, &mut s1, &mut o1);
        head_loop(&head, &mut s2, &mut o2);
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&o1), bits(&o2));
        assert_eq!(bits(&s1), bits(&s2));
    }

    #[test]
    fn state_carried_across_chunks_equals_one_pass() {
        let d = DeltaDims {
            k_heads: 1,
            v_heads: 3,
            k_dim: 8,
            v_dim: 8,
        };
        let t = 20;
        let [q, k, v, gate, beta] = inputs(10, d, t);
        let mut s_all = vec![0.0f32; d.state_len()];
        let mut all = vec![0.0f32; v.len()];
        gated_delta_rule(d, &q, &k, &v, &gate, &beta, &mut s_all, &mut all);
        let mut s = vec![0.0f32; d.state_len()];
        let mut got = Vec::new();
        for (a, b) in [(0, 7), (7, 8), (8, 20)] {
            let qk = |x: &[f32]| x[a * d.k_dim..b * d.k_dim].to_vec();
            let mut o = vec![f32::NAN; (b - a) * d.v_heads * d.v_dim];
            gated_delta_rule(
                d,
                &qk(&q),
                &qk(&k),
                &v[a * 3 * 8..b * 3 * 8],
                &gate[a * 3..b * 3],
                &beta[a * 3..b * 3],
                &mut s,
                &mut o,
            );
            got.extend(o);
        }
        assert_eq!(got, all);
        assert_eq!(s, s_all);
    }

    #[test]
    fn nan_in_a_value_poisons_later_outputs_of_that_head_only() {
        let d = DeltaDims {
            k_heads: 1,
            v_heads: 2,
            k_dim: 4,
            v_dim: 4,
        };
        let [q, k, mut v, gate, beta] = inputs(11, d, 6);
        v[2 * 8] = f32::NAN; // token 2, head 0
        let mut state = vec![0.0f32; d.state_len()];
        let mut out = vec![0.0f32; v.len()];
        gated_delta_rule(d, &q, &k, &v, &gate, &beta, &mut state, &mut out);
        assert!(out[..2 * 8].iter().all(|x| x.is_finite()));
        assert!(out[5 * 8..5 * 8 + 4].iter().any(|x| x.is_nan()));
        assert!(out[5 * 8 + 4..].iter().all(|x| x.is_finite()));
    }
}
