//! A cuBLAS handle bound to one stream: the strided-batched GEMM the
//! composed attention route uses (f16/bf16 or f32 operands, f32 compute) and
//! the row-major `y = x · Wᵀ` of the backend's linear layers ([`Blas::linear`]).
//! The linear runs on cuBLASLt with what each distinct shape needs (matmul
//! descriptor, layouts, the heuristic's algorithm) built on its first call
//! and kept ([`lt`]): a repeated shape costs one
//! `cublasLtMatmul`, not a `cublasGemmEx` with its per-call set-up. The
//! block-scaled FP8 product ([`Blas::fp8_block_linear`]) has its own plans
//! on the same handle ([`fp8`]).

mod fp8;
mod lt;

use crate::{libs, CudaError};
use cudarc::cublas::{result, sys};
use cudarc::driver::sys::CUstream;
pub use fp8::Fp8Linear;
use headroom_core::Dtype;
use lt::{alignment, Lt, LtShape};
use std::ffi::c_void;

/// Bytes of the classic handle's workspace (the cuBLAS guide's advice for
/// Hopper).
const CLASSIC_WORKSPACE_BYTES: usize = 32 << 20;

/// Device memory of the handles (workspaces, warm-up scratch), allocated in
/// the caller's current context and freed on drop.
struct Scratch {
    ptr: cudarc::driver::sys::CUdeviceptr,
}

impl Scratch {
    /// `bytes` of device memory, contents undefined.
    fn new(bytes: usize) -> Result<Scratch, CudaError> {
        // SAFETY: the caller's context is current; freed in `Drop`.
        let ptr = unsafe { cudarc::driver::result::malloc_sync(bytes) }?;
        Ok(Scratch { ptr })
    }

    /// `bytes` of device memory, zeroed.
    fn zeroed(bytes: usize) -> Result<Scratch, CudaError> {
        let s = Scratch::new(bytes)?;
        // SAFETY: `s` holds `bytes`.
        unsafe { cudarc::driver::result::memset_d8_sync(s.ptr, 0, bytes) }?;
        Ok(s)
    }

    fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_sync in `new`, freed once.
        let _ = unsafe { cudarc::driver::result::free_sync(self.ptr) };
    }
}

pub struct Blas {
    /// Destroyed (`Drop`) before the fields below, the workspace among them.
    handle: sys::cublasHandle_t,
    /// The classic handle's device workspace (`cublasSetWorkspace`), kept
    /// for as long as the handle.
    _workspace: Scratch,
    /// cuBLASLt with its plan cache; `None` where it could not be set up
    /// (the linear then takes `cublasGemmEx`).
    lt: Option<Lt>,
    /// The FP8 plans on `lt`'s handle.
    fp8: fp8::Fp8Plans,
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
        let lt = Lt::new(stream).ok();
        // The classic handle's calls (the composed route's batched GEMMs)
        // get a workspace of their own, zeroed once. Without one the handle
        // takes a workspace from the driver's pool per call, which a step
        // recorded as a CUDA graph turns into allocation nodes (H200,
        // session 24: the graphed batch-1 decode went from 299.9 tok/s,
        // slower than eager, to 417 once the handle had a workspace).
        let workspace = Scratch::zeroed(CLASSIC_WORKSPACE_BYTES).and_then(|w| {
            // SAFETY: `w` holds CLASSIC_WORKSPACE_BYTES and outlives the
            // handle (`Drop`); the handle is live.
            unsafe {
                sys::cublasSetWorkspace_v2(handle, w.ptr() as *mut c_void, CLASSIC_WORKSPACE_BYTES)
            }
            .result()?;
            Ok(w)
        });
        let workspace = match workspace {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { result::destroy_handle(handle) };
                return Err(e);
            }
        };
        Ok(Blas {
            handle,
            _workspace: workspace,
            lt,
            fp8: fp8::Fp8Plans::new(),
        })
    }

    /// The cuBLASLt plans kept (one per distinct linear shape), or `None`
    /// where [`Blas::linear`] runs on `cublasGemmEx` (no cuBLASLt).
    pub fn lt_plans(&self) -> Option<usize> {
        self.lt.as_ref().map(Lt::plans)
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

/// A row-major product `y[t][out] (+)= x[t][in] · W[out][in]ᵀ` by device address.
#[derive(Debug, Clone, Copy)]
pub struct Linear {
    pub x: u64,
    pub x_dtype: Dtype,
    pub w: u64,
    pub w_dtype: Dtype,
    pub y: u64,
    pub y_dtype: Dtype,
    pub rows: usize,
    pub in_features: usize,
    pub out_features: usize,
    /// Adds to `y` (beta 1) instead of overwriting it.
    pub accumulate: bool,
}

/// What decides the kernels cuBLAS runs for a GEMM (`tag` names the call's
/// kind), for a recorded step's signature (`crate::device::capture`): the
/// row count's plan bucket (within one the plan, so the kernels, are the
/// same and only the grid grows), the other sizes and the dtypes.
pub(crate) fn call_class(
    tag: u64,
    rows: usize,
    n: usize,
    k: usize,
    dtypes: [Dtype; 3],
) -> [u64; 7] {
    [
        tag,
        lt::row_bucket(rows) as u64,
        n as u64,
        k as u64,
        dtypes[0] as u64,
        dtypes[1] as u64,
        dtypes[2] as u64,
    ]
}

impl Linear {
    /// This GEMM's [`call_class`].
    pub(crate) fn call_class(&self) -> [u64; 7] {
        call_class(
            1,
            self.rows,
            self.out_features,
            self.in_features,
            [self.x_dtype, self.w_dtype, self.y_dtype],
        )
    }

    /// The column-major GEMM `yᵀ = W · xᵀ` of this product: `(m, n, k)` =
    /// (out features, rows, in features), each within i32.
    fn dims(&self) -> Result<(i32, i32, i32), CudaError> {
        let dim = |v: usize| {
            i32::try_from(v).map_err(|_| CudaError::Blas(format!("GEMM dimension {v} exceeds i32")))
        };
        Ok((
            dim(self.out_features)?,
            dim(self.rows)?,
            dim(self.in_features)?,
        ))
    }

    /// What a cuBLASLt plan depends on.
    fn lt_shape(&self) -> LtShape {
        LtShape {
            out_features: self.out_features,
            rows: self.rows,
            in_features: self.in_features,
            x: self.x_dtype,
            w: self.w_dtype,
            y: self.y_dtype,
            align: [alignment(self.w), alignment(self.x), alignment(self.y)],
        }
    }
}

impl Blas {
    /// Row-major `y = x · Wᵀ` by the column-major identity `yᵀ = W · xᵀ`:
    /// cuBLAS sees `W` as a column-major `[in][out]` matrix (transposed) and
    /// `x`, `y` as column-major `[in][t]`, `[out][t]`. f32 compute. On
    /// cuBLASLt with the shape's cached plan; on `cublasGemmEx` where
    /// cuBLASLt is missing or has no algorithm for the shape.
    ///
    /// # Safety
    /// `x`, `w` and `y` must address `rows·in`, `out·in` and `rows·out`
    /// elements of their dtypes.
    pub unsafe fn linear(&self, l: &Linear) -> Result<(), CudaError> {
        let (m, n, k) = l.dims()?;
        if let Some(lt) = &self.lt {
            let beta = if l.accumulate { 1f32 } else { 0f32 };
            if lt.matmul(&l.lt_shape(), l.w, l.x, l.y, beta)? {
                return Ok(());
            }
        }
        self.gemm_ex(l, m, n, k)
    }

    /// [`Blas::linear`] on `cublasGemmEx` (`CUBLAS_GEMM_DEFAULT`) whatever
    /// cuBLASLt holds: the path before the plan cache, kept for the host
    /// cost comparison (`tests/linear_host.rs`) and as the fallback.
    ///
    /// # Safety
    /// As [`Blas::linear`].
    pub unsafe fn linear_gemm_ex(&self, l: &Linear) -> Result<(), CudaError> {
        let (m, n, k) = l.dims()?;
        self.gemm_ex(l, m, n, k)
    }

    unsafe fn gemm_ex(&self, l: &Linear, m: i32, n: i32, k: i32) -> Result<(), CudaError> {
        let (alpha, beta) = (1f32, if l.accumulate { 1f32 } else { 0f32 });
        result::gemm_ex(
            self.handle,
            sys::cublasOperation_t::CUBLAS_OP_T,
            sys::cublasOperation_t::CUBLAS_OP_N,
            m,
            n,
            k,
            &alpha as *const f32 as *const c_void,
            l.w as *const c_void,
            data_type(l.w_dtype),
            k,
            l.x as *const c_void,
            data_type(l.x_dtype),
            k,
            &beta as *const f32 as *const c_void,
            l.y as *mut c_void,
            data_type(l.y_dtype),
            m,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )?;
        Ok(())
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the handle was created in `new` and is destroyed once,
        // before the workspace it used (a field, dropped after this).
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}
