//! The composed route on the GPU: per block of `qL` query rows and per KV
//! head, S = Q·Kᵀ by one strided-batched cuBLAS GEMM over the group's query
//! heads (K shared by stride 0: no copy per query head), the masked-softmax
//! kernel (f32 scores → f16/bf16 probabilities, lower-right causal with
//! history), then O = P·V by a second batched GEMM written straight into the
//! output. Only keys some row of the block can see are computed.

use super::RawBuffers;
use crate::blas::Operand;
use crate::device::CudaDevice;
use crate::CudaError;
use headroom_core::{AttentionError, AttentionShape, Dtype};
use std::ffi::c_void;

/// Threads per softmax CTA (`SOFTMAX_THREADS` in the kernel).
const SOFTMAX_THREADS: u32 = 256;

/// The masked-softmax kernel writing probabilities in `dtype`.
pub fn softmax_entry(dtype: Dtype) -> Option<&'static str> {
    match dtype {
        Dtype::Bf16 => Some("attn_masked_softmax_bf16"),
        Dtype::F16 => Some("attn_masked_softmax_f16"),
        Dtype::F32 => None,
    }
}

/// Scores (f32) + probabilities (storage dtype) for one block of `qb` rows.
pub fn workspace_bytes(shape: &AttentionShape, dtype: Dtype, qb: usize) -> usize {
    shape.q_heads * qb * shape.kv_len * (4 + dtype.size_bytes())
}

/// Runs the route; returns the query block that ran.
pub(super) fn run(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    query_block: usize,
    scale_log2: f32,
    bufs: &RawBuffers,
) -> Result<usize, CudaError> {
    let qb = if query_block == 0 {
        shape.q_len
    } else {
        query_block.min(shape.q_len)
    };
    let softmax = softmax_entry(dtype).ok_or(AttentionError::UnsupportedDtype {
        dtype,
        route: "composed",
        backend: "cuda",
    })?;
    let f = dev.function(softmax)?;
    let blas = dev.blas()?;
    let es = dtype.size_bytes();
    let d = shape.head_dim;
    let g = shape.group();
    let hist = shape.history();
    let scores = dev.alloc(shape.q_heads * qb * shape.kv_len * 4)?;
    let probs = dev.alloc(shape.q_heads * qb * shape.kv_len * es)?;

    let mut q0 = 0;
    while q0 < shape.q_len {
        let rows = qb.min(shape.q_len - q0);
        let n_keys = shape.kv_len.min(hist + q0 + rows);
        for kvh in 0..shape.kv_heads {
            let h0 = kvh * g;
            let k_head = bufs.k + (kvh * shape.kv_len * d * es) as u64;
            let q_first = bufs.q + ((h0 * shape.q_len + q0) * d * es) as u64;
            dev.capture()
                .library_call(&crate::blas::call_class(3, n_keys, rows, d, [dtype; 3]));
            // SAFETY: all offsets stay inside the validated buffers and the workspace.
            unsafe {
                blas.gemm_strided_batched(
                    true,
                    false,
                    n_keys,
                    rows,
                    d,
                    1.0,
                    Operand {
                        ptr: k_head,
                        dtype,
                        ld: d,
                        stride: 0,
                    },
                    Operand {
                        ptr: q_first,
                        dtype,
                        ld: d,
                        stride: shape.q_len * d,
                    },
                    Operand {
                        ptr: scores.ptr() + (h0 * rows * n_keys * 4) as u64,
                        dtype: Dtype::F32,
                        ld: n_keys,
                        stride: rows * n_keys,
                    },
                    g,
                )?;
            }
        }
        launch_softmax(dev, f, &scores, &probs, shape, rows, n_keys, q0, scale_log2)?;
        for kvh in 0..shape.kv_heads {
            let h0 = kvh * g;
            let v_head = bufs.v + (kvh * shape.kv_len * d * es) as u64;
            let o_first = bufs.out + ((h0 * shape.q_len + q0) * d * es) as u64;
            dev.capture()
                .library_call(&crate::blas::call_class(4, n_keys, rows, d, [dtype; 3]));
            // SAFETY: as above.
            unsafe {
                blas.gemm_strided_batched(
                    false,
                    false,
                    d,
                    rows,
                    n_keys,
                    1.0,
                    Operand {
                        ptr: v_head,
                        dtype,
                        ld: d,
                        stride: 0,
                    },
                    Operand {
                        ptr: probs.ptr() + (h0 * rows * n_keys * es) as u64,
                        dtype,
                        ld: n_keys,
                        stride: rows * n_keys,
                    },
                    Operand {
                        ptr: o_first,
                        dtype,
                        ld: d,
                        stride: shape.q_len * d,
                    },
                    g,
                )?;
            }
        }
        q0 += rows;
    }
    // The workspace returns to the caching pool when dropped: the kernels
    // that use it are queued on the device stream, and any later user of the
    // same memory is queued after them on that stream (no synchronisation).
    drop((scores, probs));
    Ok(qb)
}

#[allow(clippy::too_many_arguments)]
fn launch_softmax(
    dev: &CudaDevice,
    f: crate::device::Function,
    scores: &crate::alloc::DeviceBuffer,
    probs: &crate::alloc::DeviceBuffer,
    shape: &AttentionShape,
    rows: usize,
    n_keys: usize,
    q0: usize,
    scale_log2: f32,
) -> Result<(), CudaError> {
    let (mut s, mut p) = (scores.ptr(), probs.ptr());
    let (mut block_rows, mut n, mut ld) = (rows as i32, n_keys as i32, n_keys as i32);
    let (mut history, mut q0, mut scale) = (shape.history() as i32, q0 as i32, scale_log2);
    let mut params: [*mut c_void; 8] = [
        &mut s as *mut u64 as *mut c_void,
        &mut p as *mut u64 as *mut c_void,
        &mut block_rows as *mut i32 as *mut c_void,
        &mut n as *mut i32 as *mut c_void,
        &mut ld as *mut i32 as *mut c_void,
        &mut history as *mut i32 as *mut c_void,
        &mut q0 as *mut i32 as *mut c_void,
        &mut scale as *mut f32 as *mut c_void,
    ];
    let grid = ((shape.q_heads * rows) as u32, 1, 1);
    // SAFETY: scores/probs hold q_heads·rows·n_keys elements; params match the kernel.
    unsafe { dev.launch(f, grid, (SOFTMAX_THREADS, 1, 1), 0, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_block_size_matches_the_kernel_source() {
        let want = format!("constexpr int SOFTMAX_THREADS = {SOFTMAX_THREADS};");
        assert!(super::super::sources::MASKED_SOFTMAX.source.contains(&want));
    }

    #[test]
    fn workspace_grows_with_the_query_block_and_kv_len() {
        let s = AttentionShape {
            q_len: 1024,
            kv_len: 4096,
            q_heads: 16,
            kv_heads: 2,
            head_dim: 256,
            scale: None,
        };
        // f32 scores + bf16 probabilities for 16 heads x 512 rows x 4096 keys.
        assert_eq!(workspace_bytes(&s, Dtype::Bf16, 512), 16 * 512 * 4096 * 6);
        assert_eq!(
            workspace_bytes(&s, Dtype::Bf16, 128) * 4,
            workspace_bytes(&s, Dtype::Bf16, 512)
        );
    }
}
