//! The host side of the FP8 tests: the e4m3 codec (decode, nearest-even
//! encode with saturation), random block-scaled weights with scales that
//! vary by orders of magnitude, the activation quantization as the kernel
//! specifies it, f64 references and the tolerance check.

use half::bf16;
use rand::{Rng, SeedableRng};

/// Largest finite e4m3.
pub const E4M3_MAX: f32 = 448.0;
/// Rows / columns of a scale block.
pub const BLOCK: usize = 128;

/// The value of e4m3 code `b` (NaN for 0x7f / 0xff).
pub fn e4m3(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((b >> 3) & 0xf);
    let m = f64::from(b & 7);
    if e == 15 && b & 7 == 7 {
        return f64::NAN;
    }
    let mag = if e == 0 {
        m / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f64.powi(e - 7)
    };
    sign * mag
}

/// The e4m3 code nearest to `v` (ties to the even code), saturated to
/// ±448; NaN to 0x7f.
pub fn e4m3_rne(v: f32) -> u8 {
    if v.is_nan() {
        return 0x7f;
    }
    let sign = if v.is_sign_negative() { 0x80 } else { 0 };
    let a = f64::from(v.abs());
    let mut best = 0u8;
    let mut best_d = f64::INFINITY;
    for c in 0u8..=0x7e {
        let d = (e4m3(c) - a).abs();
        if d < best_d || (d == best_d && c & 1 == 0) {
            best = c;
            best_d = d;
        }
    }
    sign | best
}

/// `n` values uniform in `[-1, 1)` rounded to bf16.
pub fn uniform_bf16(seed: u64, n: usize) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32(g.random::<f32>() * 2.0 - 1.0).to_f32())
        .collect()
}

/// bf16 bits of values that are bf16 already.
pub fn bf16_bits(v: &[f32]) -> Vec<u16> {
    v.iter().map(|&f| bf16::from_f32(f).to_bits()).collect()
}

/// f32 values of bf16 bits.
pub fn from_bf16_bits(v: &[u16]) -> Vec<f32> {
    v.iter().map(|&b| bf16::from_bits(b).to_f32()).collect()
}

/// A block-scaled FP8 matrix on the host: e4m3 `[n][k]` (random finite
/// codes: magnitudes 2^-9 ..= 448) and scales 2^U(-8, 8) per 128 × 128 block.
pub struct HostFp8 {
    pub n: usize,
    pub k: usize,
    pub w: Vec<u8>,
    pub s: Vec<f32>,
}

impl HostFp8 {
    pub fn random(seed: u64, n: usize, k: usize) -> HostFp8 {
        let mut g = rand::rngs::StdRng::seed_from_u64(seed);
        let w = (0..n * k)
            .map(|_| loop {
                let b: u8 = g.random();
                if b & 0x7f != 0x7f {
                    break b;
                }
            })
            .collect();
        let blocks = n.div_ceil(BLOCK) * k.div_ceil(BLOCK);
        let s = (0..blocks)
            .map(|_| 2f32.powf(g.random::<f32>() * 16.0 - 8.0))
            .collect();
        HostFp8 { n, k, w, s }
    }

    pub fn kb(&self) -> usize {
        self.k.div_ceil(BLOCK)
    }

    /// The scale of weight (r, c).
    pub fn scale(&self, r: usize, c: usize) -> f32 {
        self.s[(r / BLOCK) * self.kb() + c / BLOCK]
    }

    /// The real weights `[n][k]` in f64.
    pub fn dequant_f64(&self) -> Vec<f64> {
        (0..self.n * self.k)
            .map(|i| e4m3(self.w[i]) * f64::from(self.scale(i / self.k, i % self.k)))
            .collect()
    }

    /// The weights as the fallback's dequantization writes them: the f32
    /// product rounded once to bf16.
    pub fn dequant_bf16(&self) -> Vec<f32> {
        (0..self.n * self.k)
            .map(|i| {
                let f = e4m3(self.w[i]) as f32 * self.scale(i / self.k, i % self.k);
                bf16::from_f32(f).to_f32()
            })
            .collect()
    }
}

/// The activation quantization as `fp8_quant_bf16` specifies it: per (row,
/// 128 columns) scale = amax / 448 in f32 (1 for an all-zero group), code =
/// nearest-even e4m3 of x / scale (f32), saturated. Returns codes `[m][k]`
/// and scales `[m][kb]`.
pub fn quantize(x: &[f32], m: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let kb = k.div_ceil(BLOCK);
    let mut q = vec![0u8; m * k];
    let mut s = vec![0f32; m * kb];
    for r in 0..m {
        for g in 0..kb {
            let cols = g * BLOCK..((g + 1) * BLOCK).min(k);
            let amax = cols.clone().fold(0f32, |a, c| a.max(x[r * k + c].abs()));
            let scale = if amax > 0.0 { amax / E4M3_MAX } else { 1.0 };
            s[r * kb + g] = scale;
            for c in cols {
                q[r * k + c] = e4m3_rne(x[r * k + c] / scale);
            }
        }
    }
    (q, s)
}

/// The activations codes · scales represent, in f64.
pub fn dequant_act(q: &[u8], s: &[f32], m: usize, k: usize) -> Vec<f64> {
    let kb = k.div_ceil(BLOCK);
    (0..m * k)
        .map(|i| e4m3(q[i]) * f64::from(s[(i / k) * kb + (i % k) / BLOCK]))
        .collect()
}

/// `(y, Σ|x·w|)` `[rows][n]` in f64 for x `[rows][k]` and w `[n][k]`.
pub fn reference(x: &[f64], w: &[f64], rows: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * n];
    let mut l1 = vec![0.0; rows * n];
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            let (mut s, mut a) = (0.0f64, 0.0f64);
            for (xv, wv) in xr.iter().zip(wr) {
                let p = xv * wv;
                s += p;
                a += p.abs();
            }
            y[r * n + j] = s;
            l1[r * n + j] = a;
        }
    }
    (y, l1)
}

/// The worst `|got - want| / (rel · |want| + sum · Σ|x·w|)` over the
/// outputs (≤ 1: within tolerance), infinite for a non-finite output.
pub fn worst_ratio(got: &[f32], want: &[f64], l1: &[f64], rel: f64, sum: f64) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .zip(l1)
        .map(|((&g, &w), &a)| {
            if !g.is_finite() {
                return f64::INFINITY;
            }
            (f64::from(g) - w).abs() / (rel * w.abs() + sum * a + 1e-30)
        })
        .fold(0.0, f64::max)
}

/// Every output finite and within `rel · |want| + sum · Σ|x·w|`.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], l1: &[f64], rel: f64, sum: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, ((&g, &w), &a)) in got.iter().zip(want).zip(l1).enumerate() {
        assert!(
            g.is_finite(),
            "{what}: output {i} is {g} (want {w}): not written?"
        );
        let tol = rel * w.abs() + sum * a + 1e-30;
        assert!(
            (f64::from(g) - w).abs() <= tol,
            "{what}: output {i}: {g} vs {w} (tol {tol})"
        );
    }
}

#[test]
fn the_host_codec_round_trips_and_saturates() {
    // Every finite code decodes and encodes back (0x80, -0, encodes as itself).
    for b in 0u8..=255 {
        if b & 0x7f == 0x7f {
            assert!(e4m3(b).is_nan());
            continue;
        }
        assert_eq!(e4m3_rne(e4m3(b) as f32), b, "code {b:#x}");
    }
    assert_eq!(e4m3(0x7e), 448.0);
    assert_eq!(e4m3(0x01), 2f64.powi(-9));
    assert_eq!(e4m3_rne(1000.0), 0x7e);
    assert_eq!(e4m3_rne(-449.0), 0xfe);
    // 1 + 1/16 lies halfway between 1 (0x38, even) and 1.125 (0x39).
    assert_eq!(e4m3_rne(1.0625), 0x38);
    assert_eq!(e4m3_rne(1.1875), 0x3a);
}
