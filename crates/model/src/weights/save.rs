//! Writing tensors to a safetensors file (used by `headroom logits` and by
//! tests that build checkpoints), atomically through [`crate::files`]. On little-endian machines the tensor data
//! is written straight from memory, without a second copy.

use super::WeightsError;
use crate::{Tensor, TensorData};
use safetensors::tensor::View;
use safetensors::Dtype as StDtype;
use std::borrow::Cow;
use std::path::Path;

/// A borrowed tensor in safetensors' view of it.
struct Borrowed<'a>(&'a Tensor);

/// The little-endian bytes of `v`, each element `width` bytes wide.
fn le_bytes<T: Copy>(v: &[T], width: usize, to_le: impl Fn(T) -> Vec<u8>) -> Cow<'_, [u8]> {
    debug_assert_eq!(std::mem::size_of::<T>(), width);
    if cfg!(target_endian = "little") {
        // SAFETY: f32 / f16 / bf16 are plain data without padding; u8 has
        // alignment 1; the byte slice covers exactly the elements of `v` and
        // borrows it for its lifetime.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * width)
        })
    } else {
        Cow::Owned(v.iter().flat_map(|&x| to_le(x)).collect())
    }
}

impl View for Borrowed<'_> {
    fn dtype(&self) -> StDtype {
        match self.0.data {
            TensorData::F32(_) => StDtype::F32,
            TensorData::F16(_) => StDtype::F16,
            TensorData::Bf16(_) => StDtype::BF16,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.0.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        match &self.0.data {
            TensorData::F32(v) => le_bytes(v, 4, |x| x.to_le_bytes().to_vec()),
            TensorData::F16(v) => le_bytes(v, 2, |x| x.to_bits().to_le_bytes().to_vec()),
            TensorData::Bf16(v) => le_bytes(v, 2, |x| x.to_bits().to_le_bytes().to_vec()),
        }
    }

    fn data_len(&self) -> usize {
        self.0.numel() * self.0.dtype().size_bytes()
    }
}

/// Writes `tensors` (name, tensor) to `path` in their storage dtypes.
pub fn write_safetensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<(), WeightsError> {
    let err = |reason: String| WeightsError::Safetensors {
        path: path.display().to_string(),
        reason,
    };
    for (name, t) in tensors {
        if t.shape.iter().product::<usize>() != t.numel() {
            return Err(err(format!(
                "tensor `{name}`: shape {:?} does not hold {} elements",
                t.shape,
                t.numel()
            )));
        }
    }
    let views = tensors.iter().map(|(name, t)| (*name, Borrowed(t)));
    crate::files::write_atomic_via_path(path, &[], |tmp| {
        safetensors::tensor::serialize_to_file(views, None, tmp).map_err(|e| match e {
            safetensors::SafeTensorError::IoError(io) => io,
            other => std::io::Error::other(other.to_string()),
        })
    })
    .map_err(WeightsError::File)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn round_trips_every_dtype_through_the_safetensors_crate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let a = Tensor::from_f32(
            vec![2, 3],
            vec![1.0, -2.5, 3.25, f32::MIN_POSITIVE, 0.0, 7e9],
        );
        let b = Tensor::new(
            vec![3],
            TensorData::F16([0.5f32, -1.0, 65504.0].map(f16::from_f32).to_vec()),
        );
        let c = Tensor::new(
            vec![1, 2],
            TensorData::Bf16([3.0f32, -0.125].map(bf16::from_f32).to_vec()),
        );
        write_safetensors(&path, &[("a", &a), ("b", &b), ("c", &c)]).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let a2 = st.tensor("a").unwrap();
        assert_eq!((a2.dtype(), a2.shape()), (StDtype::F32, &[2usize, 3][..]));
        let a2: Vec<f32> = a2
            .data()
            .chunks_exact(4)
            .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
            .collect();
        assert_eq!(a2, a.to_f32_vec());
        let b2 = st.tensor("b").unwrap();
        assert_eq!(b2.dtype(), StDtype::F16);
        let b2: Vec<f32> = b2
            .data()
            .chunks_exact(2)
            .map(|x| f16::from_bits(u16::from_le_bytes([x[0], x[1]])).to_f32())
            .collect();
        assert_eq!(b2, b.to_f32_vec());
        let c2 = st.tensor("c").unwrap();
        assert_eq!((c2.dtype(), c2.shape()), (StDtype::BF16, &[1usize, 2][..]));
        assert_eq!(c2.data(), &[0x40u8, 0x40, 0x00, 0xBE][..]);
    }

    #[test]
    fn inconsistent_shape_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let bad = Tensor {
            shape: vec![4],
            data: TensorData::F32(vec![0.0; 3]),
        };
        let err =
            write_safetensors(&dir.path().join("t.safetensors"), &[("bad", &bad)]).unwrap_err();
        assert!(err.to_string().contains("bad"), "{err}");
    }
}
