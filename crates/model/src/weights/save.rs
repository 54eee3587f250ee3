//! Writing tensors to a safetensors file (used by `headroom logits` and by
//! tests that build checkpoints), atomically through [`crate::files`]. On little-endian machines the tensor data
//! is written straight from memory, without a second copy.

use super::WeightsError;
use crate::{Tensor, TensorData};
use safetensors::tensor::View;
use safetensors::Dtype as StDtype;
use std::borrow::Cow;
use std::path::Path;

/// One safetensors entry, its data borrowed where the layout allows.
struct Entry<'a> {
    dtype: StDtype,
    shape: Vec<usize>,
    data: Cow<'a, [u8]>,
}

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

impl View for &Entry<'_> {
    fn dtype(&self) -> StDtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }

    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The entries of one tensor: itself, and for FP8 also `<name>_scale_inv`
/// (f32, the weight's leading dims then the block grid, as transformers saves it).
fn entries<'a>(name: &str, t: &'a Tensor) -> Result<Vec<(String, Entry<'a>)>, String> {
    let plain = |dtype, data| {
        vec![(
            name.to_string(),
            Entry {
                dtype,
                shape: t.shape.clone(),
                data,
            },
        )]
    };
    Ok(match &t.data {
        TensorData::F32(v) => plain(StDtype::F32, le_bytes(v, 4, |x| x.to_le_bytes().to_vec())),
        TensorData::F16(v) => plain(
            StDtype::F16,
            le_bytes(v, 2, |x| x.to_bits().to_le_bytes().to_vec()),
        ),
        TensorData::Bf16(v) => plain(
            StDtype::BF16,
            le_bytes(v, 2, |x| x.to_bits().to_le_bytes().to_vec()),
        ),
        TensorData::Fp8E4m3(q) => {
            let rank = t.shape.len();
            if rank < 2 || t.shape[rank - 2] != q.rows || t.shape[rank - 1] != q.cols {
                return Err(format!(
                    "tensor `{name}`: fp8 blocks restart every {} rows, which a shape-{:?} \
                     tensor with one scale tensor cannot express",
                    q.rows, t.shape
                ));
            }
            let (_, gr, gc) = q.grid();
            let mut scale_shape = t.shape[..rank - 2].to_vec();
            scale_shape.extend([gr, gc]);
            let mut out = plain(StDtype::F8_E4M3, Cow::Borrowed(&q.bits[..]));
            out.push((
                format!("{name}_scale_inv"),
                Entry {
                    dtype: StDtype::F32,
                    shape: scale_shape,
                    data: le_bytes(&q.scale_inv, 4, |x| x.to_le_bytes().to_vec()),
                },
            ));
            out
        }
    })
}

/// Writes `tensors` (name, tensor) to `path` in their storage dtypes (an
/// FP8 tensor as `F8_E4M3` plus its f32 `<name>_scale_inv`).
pub fn write_safetensors(path: &Path, tensors: &[(&str, &Tensor)]) -> Result<(), WeightsError> {
    let err = |reason: String| WeightsError::Safetensors {
        path: path.display().to_string(),
        reason,
    };
    let mut all = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if t.shape.iter().product::<usize>() != t.numel() {
            return Err(err(format!(
                "tensor `{name}`: shape {:?} does not hold {} elements",
                t.shape,
                t.numel()
            )));
        }
        all.extend(entries(name, t).map_err(err)?);
    }
    let views = all.iter().map(|(name, e)| (name.as_str(), e));
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
