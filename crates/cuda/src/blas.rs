//! A cuBLAS handle bound to one stream, and the strided-batched GEMM the
//! composed attention route uses (f16/bf16 or f32 operands, f32 compute).

use crate::{libs, CudaError};
use cudarc::cublas::{result, sys};
use cudarc::driver::sys::CUstream;
use headroom_core::Dtype;
use std::ffi::c_void;

pub struct Blas {
    handle: sys::cublasHandle_t,
}

// SAFETY: the handle is only used through &self calls that cuBLAS allows from
// any thread; Headroom issues them from one thread at a time.
unsafe impl Send for Blas {}
unsafe impl Sync for Blas {}

fn data_type(d: Dtype) -> sys::cudaDataType {
    match d {
        Dtype::F32 => sys::cudaDataType::CUDA_R_32F,
        Dtype::F16 => sys::cudaDataType::CUDA_R_16F,
        Dtype::Bf16 => sys::cudaDataType::CUDA_R_16BF,
    }
}

/// One operand of a column-major GEMM: pointer, dtype, leading dim, batch stride (elements).
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub ptr: u64,
    pub dtype: Dtype,
    pub ld: usize,
    pub stride: usize,
}

impl Blas {
    pub fn new(stream: CUstream) -> Result<Self, CudaError> {
        libs::probe_cublas()?;
        let handle = result::create_handle()?;
        // SAFETY: handle is fresh; the stream belongs to the current context.
        unsafe { result::set_stream(handle, stream as sys::cudaStream_t)? };
        Ok(Blas { handle })
    }

    /// Column-major `C[i] = alpha · op(A[i]) · op(B[i])` for `batch` matrices,
    /// `C` m×n, f32 compute. `trans_a`/`trans_b` transpose A/B.
    ///
    /// # Safety
    /// Every operand must address device memory covering `batch` strided matrices.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_strided_batched(
        &self,
        trans_a: bool,
        trans_b: bool,
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: Operand,
        b: Operand,
        c: Operand,
        batch: usize,
    ) -> Result<(), CudaError> {
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let beta = 0f32;
        result::gemm_strided_batched_ex(
            self.handle,
            op(trans_a),
            op(trans_b),
            m as i32,
            n as i32,
            k as i32,
            &alpha as *const f32 as *const c_void,
            a.ptr as *const c_void,
            data_type(a.dtype),
            a.ld as i32,
            a.stride as i64,
            b.ptr as *const c_void,
            data_type(b.dtype),
            b.ld as i32,
            b.stride as i64,
            &beta as *const f32 as *const c_void,
            c.ptr as *mut c_void,
            data_type(c.dtype),
            c.ld as i32,
            c.stride as i64,
            batch as i32,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )?;
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `new` and is destroyed once.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}
