//! The block-scaled FP8 product on cuBLASLt (Hopper, cuBLAS 12.9+):
//! `y[rows][out] = (xq · sx) · (W · sw)ᵀ` with e4m3 `xq` `[rows][in]` and one
//! f32 scale per (row, 128-column group) (`CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F`),
//! e4m3 `W` `[out][in]` with one f32 scale per 128 × 128 block
//! (`..._BLK128x128_32F`), bf16 `y`, f32 accumulation. A plan per shape and
//! (descriptors and the heuristic's algorithm) is built on its
//! first call and kept, as the bf16 plans of [`super::lt`]; a shape the
//! heuristic has no algorithm for is remembered and answers `Ok(false)`
//! (the caller's fallback runs).

use super::lt::{alignment, lt_err, Capped, Lt, Plan, Pref};
use super::Blas;
use crate::CudaError;
use cudarc::cublaslt::{result, sys};
use std::ffi::c_void;
use std::sync::Mutex;

/// Most FP8 plans kept (see `lt::MAX_PLANS`).
const MAX_PLANS: usize = 256;

/// A block-scaled FP8 product by device address.
#[derive(Debug, Clone, Copy)]
pub struct Fp8Linear {
    /// e4m3 `[rows][in]` and its f32 scales, one per (row, 128 columns).
    pub x: u64,
    pub x_scale: u64,
    /// e4m3 `[out][in]` and its f32 scales, one per 128 × 128 block.
    pub w: u64,
    pub w_scale: u64,
    /// bf16 `[rows][out]`.
    pub y: u64,
    pub rows: usize,
    pub in_features: usize,
    pub out_features: usize,
}

/// What an FP8 plan depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Fp8Shape {
    out_features: usize,
    rows: usize,
    in_features: usize,
    align: [usize; 3],
}

/// The FP8 plans of one cuBLASLt handle.
pub(super) struct Fp8Plans(Mutex<Capped<Fp8Shape, Option<Plan>>>);

impl Fp8Plans {
    pub fn new() -> Self {
        Fp8Plans(Mutex::new(Capped::new(MAX_PLANS)))
    }
}

fn set_desc<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
) -> Result<(), CudaError> {
    // SAFETY: the descriptor is live; `v` outlives the call and has the
    // attribute's type (the callers pass i32 enums, u32 modes or pointers).
    unsafe {
        result::set_matmul_desc_attribute(
            desc,
            attr,
            v as *const T as *const c_void,
            size_of::<T>(),
        )
    }
    .map_err(lt_err)
}

/// The scale pointers of one call, on the plan's descriptor.
fn set_scales(
    desc: sys::cublasLtMatmulDesc_t,
    w_scale: u64,
    x_scale: u64,
) -> Result<(), CudaError> {
    use sys::cublasLtMatmulDescAttributes_t as D;
    set_desc(
        desc,
        D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
        &(w_scale as *const c_void),
    )?;
    set_desc(
        desc,
        D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
        &(x_scale as *const c_void),
    )
}

impl Lt {
    /// The descriptors of `s` and the heuristic's algorithm, `None` when it
    /// has none. Column-major, as the bf16 plan: A = W as `[in][out]`
    /// (transposed), B = x as `[in][rows]`, C = D = y as `[out][rows]`.
    fn fp8_plan(
        &self,
        s: &Fp8Shape,
        w_scale: u64,
        x_scale: u64,
    ) -> Result<Option<Plan>, CudaError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        use sys::cublasLtMatmulMatrixScale_t as M;
        let e4m3 = sys::cudaDataType::CUDA_R_8F_E4M3;
        let bf16 = sys::cudaDataType::CUDA_R_16BF;
        let mut plan = Plan::linear([e4m3, e4m3, bf16], s.out_features, s.rows, s.in_features)?;
        let a_mode = M::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F as u32;
        let b_mode = M::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F as u32;
        set_desc(plan.desc, D::CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode)?;
        set_desc(plan.desc, D::CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode)?;
        set_scales(plan.desc, w_scale, x_scale)?;
        let pref = Pref::new(self.workspace_bytes(), s.align)?;
        // SAFETY: every descriptor is live and describes the same GEMM.
        let found = unsafe {
            result::get_matmul_algo_heuristic(
                self.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.c,
                plan.c,
                pref.0,
            )
        };
        match found {
            Ok(h) if h.workspaceSize <= self.workspace_bytes() => {
                plan.algo = h.algo;
                plan.workspace = h.workspaceSize;
                Ok(Some(plan))
            }
            _ => Ok(None),
        }
    }
}

impl Blas {
    /// The block-scaled FP8 product `l` on cuBLASLt; `Ok(false)` (nothing
    /// launched) where cuBLASLt is missing or has no algorithm for it.
    ///
    /// # Safety
    /// `x`, `w` and `y` must address `rows·in`, `out·in` e4m3 and `rows·out`
    /// bf16; `x_scale` and `w_scale` their f32 scale tables (`rows ·
    /// ceil(in/128)` and `ceil(out/128) · ceil(in/128)` values, in the
    /// orders cuBLASLt reads: `crate::ops::fp8::gemm` lays them out).
    pub unsafe fn fp8_block_linear(&self, l: &Fp8Linear) -> Result<bool, CudaError> {
        let Some(lt) = &self.lt else {
            return Ok(false);
        };
        let s = Fp8Shape {
            out_features: l.out_features,
            rows: l.rows,
            in_features: l.in_features,
            align: [alignment(l.w), alignment(l.x), alignment(l.y)],
        };
        let mut plans = self.fp8.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(plan) = plans.get_or_try_insert(s, || lt.fp8_plan(&s, l.w_scale, l.x_scale))?
        else {
            return Ok(false);
        };
        set_scales(plan.desc, l.w_scale, l.x_scale)?;
        let (alpha, beta) = (1f32, 0f32);
        result::matmul(
            lt.handle,
            plan.desc,
            &alpha as *const f32 as *const c_void,
            &beta as *const f32 as *const c_void,
            l.w as *const c_void,
            plan.a,
            l.x as *const c_void,
            plan.b,
            l.y as *const c_void,
            plan.c,
            l.y as *mut c_void,
            plan.c,
            &plan.algo,
            lt.workspace.ptr() as *mut c_void,
            plan.workspace,
            lt.stream,
        )
        .map_err(lt_err)?;
        Ok(true)
    }

    /// FP8 plans kept (one per distinct shape and scale order).
    pub fn fp8_plans(&self) -> usize {
        self.fp8.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
