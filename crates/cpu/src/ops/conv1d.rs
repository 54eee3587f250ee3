//! Causal depthwise conv1d followed by SiLU, with the state carried across
//! chunks (transformers' `causal_conv1d_fn` / `causal_conv1d_update`, no bias).
//!
//! Layout is token-major: input and output `[T][channels]`, weight
//! `[channels][kernel]` (`conv1d.weight` without its middle dim of 1), state
//! `[kernel - 1][channels]`: the last `kernel - 1` input rows seen, zeros
//! before the first token (the reference's left zero padding).

use super::activation::silu;
use rayon::prelude::*;

/// `out[t][c] = silu(Σ_j w[c][j] · in[t - (K-1) + j][c])`, where rows before
/// `t = 0` come from `state`; then `state` becomes the last `K-1` input rows.
pub fn causal_conv1d_silu(
    x: &[f32],
    channels: usize,
    weight: &[f32],
    kernel: usize,
    state: &mut [f32],
    out: &mut [f32],
) {
    assert!(kernel >= 1);
    assert_eq!(
        weight.len(),
        channels * kernel,
        "conv1d: weight is not [C][K]"
    );
    assert_eq!(
        state.len(),
        channels * (kernel - 1),
        "conv1d: state is not [K-1][C]"
    );
    assert_eq!(x.len() % channels, 0);
    assert_eq!(out.len(), x.len());
    let t_len = x.len() / channels;
    let hist = kernel - 1;
    // Weight transposed to [K][C] so the inner loop runs along channels.
    let mut wt = vec![0.0f32; kernel * channels];
    for c in 0..channels {
        for j in 0..kernel {
            wt[j * channels + c] = weight[c * kernel + j];
        }
    }
    let state_ro: &[f32] = state;
    let input_row = |s: isize| -> &[f32] {
        if s >= 0 {
            &x[s as usize * channels..(s as usize + 1) * channels]
        } else {
            let r = (hist as isize + s) as usize;
            &state_ro[r * channels..(r + 1) * channels]
        }
    };
    out.par_chunks_mut(channels).enumerate().for_each(|(t, o)| {
        o.fill(0.0);
        for j in 0..kernel {
            let row = input_row(t as isize - hist as isize + j as isize);
            let w = &wt[j * channels..(j + 1) * channels];
            for ((ov, iv), wv) in o.iter_mut().zip(row).zip(w) {
                *ov += wv * iv;
            }
        }
        for v in o.iter_mut() {
            *v = silu(*v);
        }
    });
    // New state: the last `hist` rows of concat(state, x).
    let mut next = vec![0.0f32; hist * channels];
    for (r, dst) in next.chunks_exact_mut(channels.max(1)).enumerate() {
        let s = t_len as isize - hist as isize + r as isize;
        dst.copy_from_slice(input_row(s));
    }
    state.copy_from_slice(&next);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{rel_err, rng, uniform};

    /// F.conv1d(padding=K-1, groups=C)[..T] then SiLU, in f64, on the whole sequence.
    fn reference(x: &[f32], c: usize, w: &[f32], k: usize) -> Vec<f64> {
        let t_len = x.len() / c;
        let mut out = vec![0.0; x.len()];
        for t in 0..t_len {
            for ch in 0..c {
                let mut acc = 0.0f64;
                for j in 0..k {
                    let s = t as isize - (k as isize - 1) + j as isize;
                    if s >= 0 {
                        acc += w[ch * k + j] as f64 * x[s as usize * c + ch] as f64;
                    }
                }
                out[t * c + ch] = acc / (1.0 + (-acc).exp());
            }
        }
        out
    }

    #[test]
    fn one_pass_matches_f64_conv() {
        let mut g = rng(7);
        let (c, k) = (24, 4);
        let x = uniform(&mut g, 13 * c, 2.0);
        let w = uniform(&mut g, c * k, 1.0);
        let mut state = vec![0.0; (k - 1) * c];
        let mut out = vec![f32::NAN; x.len()];
        causal_conv1d_silu(&x, c, &w, k, &mut state, &mut out);
        assert!(rel_err(&out, &reference(&x, c, &w, k)) < 1e-6);
        assert_eq!(&state[..], &x[10 * c..]);
    }

    #[test]
    fn chunks_of_any_size_equal_one_pass() {
        let mut g = rng(8);
        let (c, k) = (10, 4);
        let x = uniform(&mut g, 23 * c, 2.0);
        let w = uniform(&mut g, c * k, 1.0);
        let mut s1 = vec![0.0; (k - 1) * c];
        let mut whole = vec![0.0; x.len()];
        causal_conv1d_silu(&x, c, &w, k, &mut s1, &mut whole);
        for chunk in [1usize, 2, 5, 7] {
            let mut s = vec![0.0; (k - 1) * c];
            let mut got = Vec::new();
            for piece in x.chunks(chunk * c) {
                let mut o = vec![f32::NAN; piece.len()];
                causal_conv1d_silu(piece, c, &w, k, &mut s, &mut o);
                got.extend(o);
            }
            assert_eq!(got, whole, "chunk {chunk}");
            assert_eq!(s, s1, "chunk {chunk}");
        }
    }
}
