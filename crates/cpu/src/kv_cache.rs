//! The KV cache of one full-attention layer: keys (after k norm and RoPE)
//! and values, head-major `[kv_heads][capacity][head_dim]` with spare
//! capacity per head, so appending a chunk or a decoded token costs
//! amortised O(new rows) instead of re-laying out the whole history.

/// Keys and values of the tokens seen so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvCache {
    len: usize,
    cap: usize,
    kv_heads: usize,
    head_dim: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl KvCache {
    /// Tokens cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `t` token-major rows `[t][kv_heads][head_dim]` of k and v.
    pub fn append(&mut self, k_new: &[f32], v_new: &[f32], t: usize, kv_heads: usize, d: usize) {
        assert_eq!(k_new.len(), t * kv_heads * d);
        assert_eq!(v_new.len(), k_new.len());
        if self.cap == 0 {
            self.kv_heads = kv_heads;
            self.head_dim = d;
        }
        assert!(
            self.kv_heads == kv_heads && self.head_dim == d,
            "KV cache reused with another shape"
        );
        let len = self.len + t;
        if len > self.cap {
            let cap = len.max(2 * self.cap);
            let grow = |old: &[f32]| -> Vec<f32> {
                let mut out = vec![0.0f32; kv_heads * cap * d];
                for h in 0..kv_heads {
                    out[h * cap * d..][..self.len * d]
                        .copy_from_slice(&old[h * self.cap * d..][..self.len * d]);
                }
                out
            };
            self.k = grow(&self.k);
            self.v = grow(&self.v);
            self.cap = cap;
        }
        for h in 0..kv_heads {
            for s in 0..t {
                let dst = (h * self.cap + self.len + s) * d;
                let src = (s * kv_heads + h) * d;
                self.k[dst..dst + d].copy_from_slice(&k_new[src..src + d]);
                self.v[dst..dst + d].copy_from_slice(&v_new[src..src + d]);
            }
        }
        self.len = len;
    }

    /// Keys and values of KV head `h`, `[len][head_dim]` each.
    pub fn head(&self, h: usize) -> (&[f32], &[f32]) {
        let start = h * self.cap * self.head_dim;
        let n = self.len * self.head_dim;
        (&self.k[start..start + n], &self.v[start..start + n])
    }

    /// All heads as one `[kv_heads][len][head_dim]` block, when the cache
    /// has no spare capacity (e.g. after a one-pass prefill).
    pub fn contiguous(&self) -> Option<(&[f32], &[f32])> {
        (self.len == self.cap).then_some((&self.k[..], &self.v[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_and_one_append_hold_the_same_rows() {
        let (kv, d, t) = (2usize, 3usize, 9usize);
        let k: Vec<f32> = (0..t * kv * d).map(|i| i as f32).collect();
        let v: Vec<f32> = k.iter().map(|x| -x).collect();
        let mut whole = KvCache::default();
        whole.append(&k, &v, t, kv, d);
        let (ck, cv) = whole.contiguous().expect("exact capacity after one append");
        let mut pieces = KvCache::default();
        for (a, b) in [(0, 4), (4, 5), (5, 9)] {
            pieces.append(
                &k[a * kv * d..b * kv * d],
                &v[a * kv * d..b * kv * d],
                b - a,
                kv,
                d,
            );
        }
        assert_eq!(pieces.len(), t);
        assert!(pieces.contiguous().is_none(), "spare capacity after growth");
        for h in 0..kv {
            let (pk, pv) = pieces.head(h);
            assert_eq!(pk, &ck[h * t * d..(h + 1) * t * d]);
            assert_eq!(pv, &cv[h * t * d..(h + 1) * t * d]);
            // Token s of head h is row s of the token-major input.
            assert_eq!(&pk[2 * d..3 * d], &k[(2 * kv + h) * d..][..d]);
        }
    }
}
