//! Block-scaled float8 e4m3 weights on the host: the e4m3 (`e4m3fn`: no
//! infinities, NaN = `0x7F` / `0xFF`, largest finite 448) conversions and
//! [`Fp8Block`], the bytes of a weight with one f32 `scale_inv` per block.
//!
//! Layout. The tensor is viewed as `[numel / cols, cols]`, cut every `rows`
//! rows into scaled matrices (`rows` = the matrix's own rows for one linear
//! weight or transformers' stacked experts; the per-expert rows when
//! per-expert checkpoint tensors were stacked, whose block grids restart at
//! each expert). Matrix `m` has a `ceil(rows / block[0]) × ceil(cols /
//! block[1])` grid of scales; `scale_inv` is `[matrices, grid rows, grid
//! cols]` row-major. Element `(r, c)` of the view is
//! `e4m3(bits) * scale_inv[m][(r % rows) / block[0]][c / block[1]]` with
//! `m = r / rows`, computed in f32 (as transformers dequantizes).

/// Why an [`Fp8Block`] cannot be formed from its parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fp8Error {
    #[error("fp8 block {block:?}, rows {rows}, cols {cols}: every one must be at least 1")]
    Empty {
        block: [usize; 2],
        rows: usize,
        cols: usize,
    },
    #[error("{len} fp8 values are not whole {rows} x {cols} matrices")]
    NotWholeMatrices {
        len: usize,
        rows: usize,
        cols: usize,
    },
    #[error("{got} scales, expected {expected} ({matrices} matrices of {grid_rows} x {grid_cols} blocks)")]
    Scales {
        got: usize,
        expected: usize,
        matrices: usize,
        grid_rows: usize,
        grid_cols: usize,
    },
}

/// Decodes one e4m3fn byte exactly (NaN for `0x7F` / `0xFF`).
pub const fn e4m3_to_f32(b: u8) -> f32 {
    let sign = ((b as u32) >> 7) << 31;
    let exp = ((b >> 3) & 0xF) as u32;
    let man = (b & 0x7) as u32;
    if exp == 0xF && man == 0x7 {
        return f32::from_bits(sign | 0x7FC0_0000);
    }
    if exp == 0 {
        // Subnormal: man * 2^-9; exact in f32 (man < 8).
        let v = man as f32 * (1.0 / 512.0);
        return if sign != 0 { -v } else { v };
    }
    f32::from_bits(sign | ((exp + 120) << 23) | (man << 20))
}

const fn decode_table() -> [f32; 256] {
    let mut t = [0.0f32; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = e4m3_to_f32(i as u8);
        i += 1;
    }
    t
}

/// Every e4m3fn byte decoded.
pub static E4M3_TABLE: [f32; 256] = decode_table();

/// Whether an e4m3fn byte is NaN (the format has no infinities).
pub const fn e4m3_is_nan(b: u8) -> bool {
    b & 0x7F == 0x7F
}

/// The largest finite e4m3fn value.
pub const E4M3_MAX: f32 = 448.0;

/// Encodes `x` to the nearest e4m3fn value (ties to even), saturating to
/// ±448 (as torch's `to(float8_e4m3fn)` after clamping); NaN stays NaN.
#[inline]
pub fn f32_to_e4m3(x: f32) -> u8 {
    if x.is_nan() {
        return 0x7F;
    }
    let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
    let a = x.abs().min(E4M3_MAX);
    if a < 2f32.powi(-6) {
        // Subnormal range: steps of 2^-9; code 8 (the smallest normal) follows code 7.
        return sign | (a * 512.0).round_ties_even() as u8;
    }
    // Normal range: drop the mantissa to 3 bits with ties to even by adding
    // just under half an ulp of the kept bits (plus the kept lowest bit); a
    // carry moves into the exponent. Branch-free: the random weights of a
    // synthetic FP8 draw make the rounding test unpredictable.
    let bits = a.to_bits();
    let rounded = (bits + 0x7_FFFF + ((bits >> 20) & 1)) >> 20;
    // f32 exponent bias 127 against e4m3's 7; a <= 448 = 1.75 * 2^8, so
    // rounding never passes 448 (code 0x7E).
    sign | (rounded - (120 << 3)) as u8
}

/// `(matrices, grid rows, grid cols)` of `len` elements cut into `rows` ×
/// `cols` matrices of `block`-sized blocks, or why they are not: an empty
/// block or matrix, or `len` not whole matrices.
fn layout(
    len: usize,
    block: [usize; 2],
    rows: usize,
    cols: usize,
) -> Result<(usize, usize, usize), Fp8Error> {
    if block[0] == 0 || block[1] == 0 || rows == 0 || cols == 0 {
        return Err(Fp8Error::Empty { block, rows, cols });
    }
    let matrix = rows.checked_mul(cols).filter(|&m| len.is_multiple_of(m));
    let Some(matrix) = matrix else {
        return Err(Fp8Error::NotWholeMatrices { len, rows, cols });
    };
    Ok((
        len / matrix,
        rows.div_ceil(block[0]),
        cols.div_ceil(block[1]),
    ))
}

/// A block-scaled e4m3 weight (see the module documentation for the layout).
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Block {
    /// e4m3fn bytes, row-major.
    pub bits: Vec<u8>,
    /// `[matrices, grid rows, grid cols]` f32 multipliers (`scale_inv`).
    pub scale_inv: Vec<f32>,
    /// Rows × columns of one block.
    pub block: [usize; 2],
    /// Rows of one scaled matrix.
    pub rows: usize,
    /// Columns (the tensor's last dimension).
    pub cols: usize,
}

impl Fp8Block {
    /// Checks that the parts fit together (whole matrices, one scale per block).
    pub fn new(
        bits: Vec<u8>,
        scale_inv: Vec<f32>,
        block: [usize; 2],
        rows: usize,
        cols: usize,
    ) -> Result<Fp8Block, Fp8Error> {
        let (matrices, grid_rows, grid_cols) = layout(bits.len(), block, rows, cols)?;
        // grid ≤ matrix size, so these products do not overflow.
        let expected = matrices * grid_rows * grid_cols;
        if scale_inv.len() != expected {
            return Err(Fp8Error::Scales {
                got: scale_inv.len(),
                expected,
                matrices,
                grid_rows,
                grid_cols,
            });
        }
        Ok(Fp8Block {
            bits,
            scale_inv,
            block,
            rows,
            cols,
        })
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.bits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }

    /// (matrices, grid rows, grid cols) of `scale_inv`.
    pub fn grid(&self) -> (usize, usize, usize) {
        let g = (
            self.rows.div_ceil(self.block[0]),
            self.cols.div_ceil(self.block[1]),
        );
        (self.bits.len() / (self.rows * self.cols), g.0, g.1)
    }

    /// Bytes held: one per element plus four per scale.
    pub fn storage_bytes(&self) -> usize {
        self.bits.len() + 4 * self.scale_inv.len()
    }

    /// Dequantizes `out.len()` elements from flat index `start` into `out`.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        let (_, grid_rows, grid_cols) = self.grid();
        let mut i = start;
        let mut done = 0;
        while done < out.len() {
            let (r, c) = (i / self.cols, i % self.cols);
            let n = (self.cols - c).min(out.len() - done);
            let srow = ((r / self.rows) * grid_rows + (r % self.rows) / self.block[0]) * grid_cols;
            let scales = &self.scale_inv[srow..srow + grid_cols];
            for (k, o) in out[done..done + n].iter_mut().enumerate() {
                let col = c + k;
                *o = E4M3_TABLE[self.bits[i + k] as usize] * scales[col / self.block[1]];
            }
            i += n;
            done += n;
        }
    }

    /// Quantizes f32 matrices (`values.len()` a multiple of `rows * cols`)
    /// with one scale per block chosen so that the block's largest magnitude
    /// maps to 448 (transformers' `FineGrainedFP8Config` rule); an all-zero
    /// block gets scale 1.
    pub fn quantize(
        values: &[f32],
        block: [usize; 2],
        rows: usize,
        cols: usize,
    ) -> Result<Fp8Block, Fp8Error> {
        let (matrices, gr, gc) = layout(values.len(), block, rows, cols)?;
        let mut scale_inv = vec![0.0f32; matrices * gr * gc];
        let mut bits = vec![0u8; values.len()];
        for m in 0..matrices {
            for br in 0..gr {
                for bc in 0..gc {
                    let rr = br * block[0]..((br + 1) * block[0]).min(rows);
                    let cc = bc * block[1]..((bc + 1) * block[1]).min(cols);
                    let at = |r: usize, c: usize| (m * rows + r) * cols + c;
                    let amax = rr
                        .clone()
                        .flat_map(|r| cc.clone().map(move |c| (r, c)))
                        .map(|(r, c)| values[at(r, c)].abs())
                        .fold(0.0f32, f32::max);
                    let s = if amax > 0.0 { amax / E4M3_MAX } else { 1.0 };
                    scale_inv[(m * gr + br) * gc + bc] = s;
                    for r in rr {
                        for c in cc.clone() {
                            bits[at(r, c)] = f32_to_e4m3(values[at(r, c)] / s);
                        }
                    }
                }
            }
        }
        Fp8Block::new(bits, scale_inv, block, rows, cols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_every_byte_like_the_format_definition() {
        for b in 0..=255u8 {
            let (s, e, m) = (b >> 7, ((b >> 3) & 0xF) as i32, (b & 7) as f64);
            let v = if e == 0xF && m == 7.0 {
                f64::NAN
            } else if e == 0 {
                m / 8.0 * 2f64.powi(-6)
            } else {
                (1.0 + m / 8.0) * 2f64.powi(e - 7)
            };
            let v = if s == 1 { -v } else { v };
            let got = e4m3_to_f32(b) as f64;
            assert!(
                got == v || (got.is_nan() && v.is_nan()),
                "{b:#x}: {got} vs {v}"
            );
            assert_eq!(e4m3_is_nan(b), v.is_nan());
        }
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
    }

    #[test]
    fn encodes_to_the_nearest_value_saturating() {
        for b in (0..=255u8).filter(|&b| !e4m3_is_nan(b)) {
            let v = e4m3_to_f32(b);
            let back = f32_to_e4m3(v);
            assert_eq!(e4m3_to_f32(back), v, "{b:#x}");
        }
        assert_eq!(f32_to_e4m3(1e6), 0x7E);
        assert_eq!(f32_to_e4m3(-1e6), 0xFE);
        assert!(e4m3_is_nan(f32_to_e4m3(f32::NAN)));
        // Between 1.0 (0x38) and 1.125 (0x39): nearest, ties to the even code.
        assert_eq!(f32_to_e4m3(1.05), 0x38);
        assert_eq!(f32_to_e4m3(1.1), 0x39);
        assert_eq!(f32_to_e4m3(1.0625), 0x38);
        assert_eq!(f32_to_e4m3(1.1875), 0x3A);
        // Every f32 goes to a nearest e4m3 value.
        let mut x = 1e-4f32;
        while x < 500.0 {
            let got = e4m3_to_f32(f32_to_e4m3(x));
            let best = (0..0x7F)
                .map(|b| (e4m3_to_f32(b) - x.min(448.0)).abs())
                .fold(f32::INFINITY, f32::min);
            assert_eq!((got - x.min(448.0)).abs(), best, "{x}");
            x *= 1.013;
        }
    }

    /// The rounding as first written (branches on the discarded bits).
    fn e4m3_by_branches(x: f32) -> u8 {
        if x.is_nan() {
            return 0x7F;
        }
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs().min(E4M3_MAX);
        if a < 2f32.powi(-6) {
            return sign | (a * 512.0).round_ties_even() as u8;
        }
        let bits = a.to_bits();
        let mut exp = (bits >> 23) as i32 - 127;
        let mant = bits & 0x7F_FFFF;
        let (mut m, rest) = (mant >> 20, mant & 0xF_FFFF);
        if rest > 0x8_0000 || (rest == 0x8_0000 && m & 1 == 1) {
            m += 1;
            if m == 8 {
                m = 0;
                exp += 1;
            }
        }
        sign | (((exp + 7) as u8) << 3) | m as u8
    }

    #[test]
    fn encodes_every_f32_from_2_to_the_minus_8_to_2_to_the_10_as_the_branchy_rounding() {
        // Every bit pattern of both signs in [2^-8, 2^10): the subnormal
        // edge, every normal binade, the saturation above 448.
        let (lo, hi) = (2f32.powi(-8).to_bits(), 2f32.powi(10).to_bits());
        for bits in lo..hi {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                assert_eq!(f32_to_e4m3(x), e4m3_by_branches(x), "{x:e}");
            }
        }
        for x in [0.0, -0.0, 1e-30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            assert_eq!(f32_to_e4m3(x), e4m3_by_branches(x), "{x:e}");
        }
    }

    #[test]
    fn parts_must_fit_together() {
        assert!(Fp8Block::new(vec![0; 6], vec![1.0; 1], [128, 128], 2, 3).is_ok());
        let e = Fp8Block::new(vec![0; 7], vec![1.0], [128, 128], 2, 3).unwrap_err();
        assert!(matches!(e, Fp8Error::NotWholeMatrices { .. }), "{e}");
        let e = Fp8Block::new(vec![0; 12], vec![1.0], [128, 128], 2, 3).unwrap_err();
        assert_eq!(
            e.to_string(),
            "1 scales, expected 2 (2 matrices of 1 x 1 blocks)"
        );
        assert!(Fp8Block::new(vec![], vec![], [0, 128], 1, 1).is_err());
    }
}
