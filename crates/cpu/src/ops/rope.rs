//! Partial rotary position embedding, transformers' `rotate_half` convention.
//!
//! Only the first `rotary_dim` dims of each head rotate; the rest pass
//! through. Within the rotated part, dim `i < rotary_dim / 2` pairs with dim
//! `i + rotary_dim / 2` (not interleaved pairs), and both use frequency
//! `inv_freq[i] = theta^(-2i / rotary_dim)`. Angles are computed in f32 as
//! transformers computes them (`position.float() * inv_freq`). For text-only
//! positions, Qwen3.5's multimodal RoPE (`mrope_section`) reduces to this.

/// Precomputed inverse frequencies of one rotary configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Rope {
    rotary_dim: usize,
    inv_freq: Vec<f32>,
}

impl Rope {
    /// `rotary_dim` must be even and at most the head dim it is applied to.
    pub fn new(rotary_dim: usize, theta: f64) -> Rope {
        assert!(
            rotary_dim.is_multiple_of(2),
            "rotary_dim {rotary_dim} must be even"
        );
        let base = theta as f32;
        let inv_freq = (0..rotary_dim / 2)
            .map(|i| 1.0 / base.powf((2 * i) as f32 / rotary_dim as f32))
            .collect();
        Rope {
            rotary_dim,
            inv_freq,
        }
    }

    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim
    }

    /// Rotates `x`, laid out `[tokens][heads][head_dim]`, in place; token `t`
    /// sits at position `pos0 + t`.
    pub fn apply(&self, x: &mut [f32], heads: usize, head_dim: usize, pos0: usize) {
        assert!(self.rotary_dim <= head_dim);
        let row = heads * head_dim;
        assert_eq!(
            x.len() % row,
            0,
            "rope: length not a multiple of heads*head_dim"
        );
        let half = self.rotary_dim / 2;
        let mut cos = vec![0.0f32; half];
        let mut sin = vec![0.0f32; half];
        for (t, tok) in x.chunks_exact_mut(row).enumerate() {
            let pos = (pos0 + t) as f32;
            for i in 0..half {
                let angle = pos * self.inv_freq[i];
                cos[i] = angle.cos();
                sin[i] = angle.sin();
            }
            for head in tok.chunks_exact_mut(head_dim) {
                let (lo, hi) = head[..self.rotary_dim].split_at_mut(half);
                for i in 0..half {
                    let (x1, x2) = (lo[i], hi[i]);
                    lo[i] = x1 * cos[i] - x2 * sin[i];
                    hi[i] = x2 * cos[i] + x1 * sin[i];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{rel_err, rng, uniform};

    /// transformers' formula in f64: `x·cos + rotate_half(x)·sin` on the rotary dims.
    fn reference(
        x: &[f32],
        heads: usize,
        d: usize,
        rd: usize,
        theta: f64,
        pos0: usize,
    ) -> Vec<f64> {
        let half = rd / 2;
        let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for (t, tok) in out.chunks_mut(heads * d).enumerate() {
            let p = (pos0 + t) as f64;
            for h in 0..heads {
                let head = &mut tok[h * d..(h + 1) * d];
                let orig = head.to_vec();
                for j in 0..rd {
                    let i = j % half;
                    let ang = p * theta.powf(-(2.0 * i as f64) / rd as f64);
                    let rot = if j < half {
                        -orig[j + half]
                    } else {
                        orig[j - half]
                    };
                    head[j] = orig[j] * ang.cos() + rot * ang.sin();
                }
            }
        }
        out
    }

    #[test]
    fn partial_rotation_matches_rotate_half_reference() {
        let mut g = rng(3);
        for (heads, d, rd, pos0) in [(2, 256, 64, 0), (3, 64, 32, 17), (1, 16, 16, 5)] {
            let x = uniform(&mut g, 11 * heads * d, 1.0);
            let mut y = x.clone();
            let rope = Rope::new(rd, 10000.0);
            rope.apply(&mut y, heads, d, pos0);
            let want = reference(&x, heads, d, rd, 10000.0, pos0);
            assert!(rel_err(&y, &want) < 1e-5, "heads {heads} d {d} rd {rd}");
            // Pass-through dims are untouched, bit for bit.
            for (a, b) in y.chunks(d).zip(x.chunks(d)) {
                assert_eq!(&a[rd..], &b[rd..]);
            }
        }
    }

    #[test]
    fn position_offset_equals_suffix_of_longer_run() {
        let mut g = rng(4);
        let (heads, d) = (2, 32);
        let x = uniform(&mut g, 10 * heads * d, 1.0);
        let rope = Rope::new(16, 1e6);
        let mut all = x.clone();
        rope.apply(&mut all, heads, d, 0);
        let mut tail = x[6 * heads * d..].to_vec();
        rope.apply(&mut tail, heads, d, 6);
        assert_eq!(&all[6 * heads * d..], &tail[..]);
    }
}
