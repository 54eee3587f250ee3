//! Host tensors holding weights in their storage dtype (f32, f16 or bf16).
//!
//! Weights stay in their storage dtype (a bf16 checkpoint of the 35B shape
//! would not fit this machine's memory as f32); compute converts rows or
//! whole tensors to f32 on use.

use crate::{Dtype, Element};
use half::{bf16, f16};

/// Row-major storage of one tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
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

    pub fn dtype(&self) -> Dtype {
        match self.data {
            TensorData::F32(_) => Dtype::F32,
            TensorData::F16(_) => Dtype::F16,
            TensorData::Bf16(_) => Dtype::Bf16,
        }
    }

    pub fn numel(&self) -> usize {
        self.data.len()
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
}
