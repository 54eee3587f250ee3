//! Host tensors holding weights in their storage dtype (f32, f16, bf16, or
//! block-scaled float8 e4m3).
//!
//! Weights stay in their storage dtype (a bf16 checkpoint of the 35B shape
//! would not fit this machine's memory as f32); compute converts rows or
//! whole tensors to f32 on use.
//!
//! FP8 weights are one more variant, [`TensorData::Fp8E4m3`], holding the
//! checkpoint's bytes and block scales ([`Fp8Block`]) as they were read, so a
//! backend can upload them as FP8; [`Tensor::read_f32`] and
//! [`Tensor::to_f32_vec`] dequantize, so every consumer that reads through
//! them handles FP8 unchanged. [`Tensor::dequantized`] turns an FP8 tensor
//! into an f32 one (the CPU backend does this at upload).

use crate::fp8::Fp8Block;
use crate::{Dtype, Element};
use half::{bf16, f16};

/// Row-major storage of one tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
    /// float8 e4m3 with one f32 scale per block (see [`crate::fp8`]).
    Fp8E4m3(Fp8Block),
}

/// A named weight's shape and data, row-major (last dimension contiguous).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl Tensor {
    pub fn new(shape: Vec<usize>, data: TensorData) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        Tensor { shape, data }
    }

    pub fn from_f32(shape: Vec<usize>, data: Vec<f32>) -> Tensor {
        Tensor::new(shape, TensorData::F32(data))
    }

    /// The element dtype; an FP8 tensor reports f32, the dtype
    /// [`Tensor::read_f32`] yields (see [`Tensor::is_fp8`], [`Tensor::storage_bytes`]).
    pub fn dtype(&self) -> Dtype {
        match self.data {
            TensorData::F32(_) | TensorData::Fp8E4m3(_) => Dtype::F32,
            TensorData::F16(_) => Dtype::F16,
            TensorData::Bf16(_) => Dtype::Bf16,
        }
    }

    /// Whether the data is block-scaled FP8.
    pub fn is_fp8(&self) -> bool {
        matches!(self.data, TensorData::Fp8E4m3(_))
    }

    /// The FP8 bytes and scales, when the tensor is FP8.
    pub fn fp8(&self) -> Option<&Fp8Block> {
        match &self.data {
            TensorData::Fp8E4m3(q) => Some(q),
            _ => None,
        }
    }

    /// The storage dtype's name (`f32`, `f16`, `bf16`, `fp8_e4m3`).
    pub fn storage_name(&self) -> &'static str {
        match self.data {
            TensorData::Fp8E4m3(_) => "fp8_e4m3",
            _ => self.dtype().as_str(),
        }
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// Bytes held: elements × dtype size, or for FP8 one byte per element
    /// plus four per block scale.
    pub fn storage_bytes(&self) -> usize {
        match &self.data {
            TensorData::Fp8E4m3(q) => q.storage_bytes(),
            _ => self.numel() * self.dtype().size_bytes(),
        }
    }

    /// The tensor with FP8 data dequantized to f32 (others unchanged).
    pub fn dequantized(self) -> Tensor {
        if self.is_fp8() {
            let data = self.to_f32_vec();
            Tensor::from_f32(self.shape, data)
        } else {
            self
        }
    }

    /// Converts `len` elements starting at flat index `start` to f32 into `out[..len]`.
    pub fn read_f32(&self, start: usize, out: &mut [f32]) {
        fn conv<T: Element>(src: &[T], out: &mut [f32]) {
            for (o, s) in out.iter_mut().zip(src) {
                *o = s.to_f32();
            }
        }
        let len = out.len();
        match &self.data {
            TensorData::F32(v) => out.copy_from_slice(&v[start..start + len]),
            TensorData::F16(v) => conv(&v[start..start + len], out),
            TensorData::Bf16(v) => conv(&v[start..start + len], out),
            TensorData::Fp8E4m3(q) => q.read_f32(start, out),
        }
    }

    /// The whole tensor as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.numel()];
        self.read_f32(0, &mut out);
        out
    }
}

impl TensorData {
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::Bf16(v) => v.len(),
            TensorData::Fp8E4m3(q) => q.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_any_dtype_as_f32() {
        let t = Tensor::new(
            vec![2, 2],
            TensorData::Bf16([1.0f32, -2.0, 0.5, 3.0].map(bf16::from_f32).to_vec()),
        );
        let mut row = [0.0f32; 2];
        t.read_f32(2, &mut row);
        assert_eq!(row, [0.5, 3.0]);
        assert_eq!(t.dtype(), Dtype::Bf16);
        assert_eq!(t.to_f32_vec(), vec![1.0, -2.0, 0.5, 3.0]);
    }

    /// f64 reference of one element of a block-scaled matrix stack.
    fn reference(q: &Fp8Block, i: usize) -> f64 {
        let (r, c) = (i / q.cols, i % q.cols);
        let (gr, gc) = (q.rows.div_ceil(128), q.cols.div_ceil(128));
        let s = q.scale_inv[((r / q.rows) * gr + (r % q.rows) / 128) * gc + c / 128];
        crate::fp8::e4m3_to_f32(q.bits[i]) as f64 * s as f64
    }

    #[test]
    fn fp8_dequantizes_against_an_f64_reference() {
        // Tails in both dimensions (200 = 128 + 72 rows, 300 = 2 * 128 + 44
        // columns), two stacked matrices, scales over 12 orders of magnitude.
        let (rows, cols, mats) = (200, 300, 2);
        let n = rows * cols * mats;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let bits: Vec<u8> = (0..n)
            .map(|_| {
                let b = next() as u8;
                if crate::fp8::e4m3_is_nan(b) {
                    b & 0xF0
                } else {
                    b
                }
            })
            .collect();
        let grid = mats * 2 * 3;
        let scales: Vec<f32> = (0..grid)
            .map(|k| 10f32.powi(k as i32 % 13 - 6) * (1.0 + (next() % 100) as f32 / 100.0))
            .collect();
        let q = Fp8Block::new(bits, scales, [128, 128], rows, cols).unwrap();
        let t = Tensor::new(vec![mats, rows, cols], TensorData::Fp8E4m3(q.clone()));
        assert!(t.is_fp8());
        assert_eq!(t.storage_bytes(), n + 4 * grid);
        assert_eq!(t.storage_name(), "fp8_e4m3");
        let all = t.to_f32_vec();
        for (i, &v) in all.iter().enumerate() {
            let want = reference(&q, i);
            assert!(
                (v as f64 - want).abs() <= want.abs() * 2f64.powi(-24),
                "element {i}: {v} vs {want}"
            );
        }
        // Unaligned partial reads agree with the whole.
        for (start, len) in [(0, 1), (127, 3), (299, 302), (rows * cols - 5, 400)] {
            let mut part = vec![f32::NAN; len];
            t.read_f32(start, &mut part);
            assert_eq!(part, all[start..start + len]);
        }
        let d = t.clone().dequantized();
        assert_eq!((d.dtype(), &d.shape), (Dtype::F32, &t.shape));
        assert_eq!(d.to_f32_vec(), all);
    }

    #[test]
    fn fp8_quantize_round_trips_within_e4m3_precision() {
        let (rows, cols) = (130, 129);
        let v: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 10f32.powi((i / cols) as i32 % 5 - 3))
            .collect();
        let q = Fp8Block::quantize(&v, [128, 128], rows, cols).unwrap();
        let mut back = vec![0.0; v.len()];
        q.read_f32(0, &mut back);
        for (i, (a, b)) in v.iter().zip(&back).enumerate() {
            let (r, c) = (i / cols, i % cols);
            let s = q.scale_inv[(r / 128) * 2 + c / 128];
            // Half an e4m3 step at the value (3 mantissa bits), or half the
            // subnormal step of the block.
            let tol = (a.abs() / 16.0).max(s * 2f32.powi(-10)) * 1.0001;
            assert!((a - b).abs() <= tol, "{i}: {a} vs {b}");
        }
    }
}
