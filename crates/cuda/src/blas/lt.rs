//! cuBLASLt for the row-major linear ([`super::Blas::linear`]): one handle,
//! one device workspace, and a plan per distinct shape — the matmul
//! descriptor, the three matrix layouts and the algorithm the heuristic
//! picked — built on the shape's first call and kept ([`Plans`]), so a
//! repeated shape costs a hash lookup and one `cublasLtMatmul`. A shape the
//! heuristic has no algorithm for is remembered as such and runs on
//! `cublasGemmEx` (the caller's fallback).

use crate::CudaError;
use cudarc::cublaslt::{result, sys};
use cudarc::driver::sys::CUstream;
use headroom_core::Dtype;
use std::collections::HashMap;
use std::ffi::c_void;
use std::hash::Hash;
use std::sync::Mutex;

/// Device workspace the heuristic may pick algorithms for (split-K ones).
const WORKSPACE_BYTES: usize = 32 << 20;
/// Most plans kept; a new shape past it starts the cache over (a serving
/// process sees its prefill chunk sizes and decode batch sizes: far fewer).
const MAX_PLANS: usize = 1024;
/// Largest pointer alignment a plan is chosen for (cuBLASLt's default).
const MAX_ALIGN: usize = 256;

/// What a plan depends on: the GEMM's shape and dtypes (`y = x · Wᵀ`, y
/// `[rows][out_features]`) and each pointer's alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct LtShape {
    pub out_features: usize,
    pub rows: usize,
    pub in_features: usize,
    pub x: Dtype,
    pub w: Dtype,
    pub y: Dtype,
    /// Alignment in bytes (a power of two up to [`MAX_ALIGN`]) of W, x and y.
    pub align: [usize; 3],
}

/// The alignment in bytes of device address `p`: its largest power-of-two
/// divisor, at most [`MAX_ALIGN`].
pub(super) fn alignment(p: u64) -> usize {
    if p == 0 {
        return MAX_ALIGN;
    }
    (1usize << p.trailing_zeros().min(MAX_ALIGN.trailing_zeros())).min(MAX_ALIGN)
}

/// A map of at most `cap` entries that starts over when a new key would
/// exceed it.
pub(super) struct Capped<K, V> {
    map: HashMap<K, V>,
    cap: usize,
}

impl<K: Hash + Eq, V> Capped<K, V> {
    pub fn new(cap: usize) -> Self {
        Capped {
            map: HashMap::new(),
            cap: cap.max(1),
        }
    }

    /// The value of `k`, made by `make` (and kept) on its first use.
    pub fn get_or_try_insert<E>(
        &mut self,
        k: K,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<&V, E> {
        if !self.map.contains_key(&k) {
            let v = make()?;
            if self.map.len() >= self.cap {
                self.map.clear();
            }
            return Ok(self.map.entry(k).or_insert(v));
        }
        Ok(&self.map[&k])
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

type Plans = Capped<LtShape, Option<Plan>>;

/// One shape's descriptors and algorithm (null handles are not yet made).
pub(super) struct Plan {
    pub desc: sys::cublasLtMatmulDesc_t,
    pub a: sys::cublasLtMatrixLayout_t,
    pub b: sys::cublasLtMatrixLayout_t,
    pub c: sys::cublasLtMatrixLayout_t,
    pub algo: sys::cublasLtMatmulAlgo_t,
    pub workspace: usize,
}

impl Plan {
    /// A plan with no descriptor made yet.
    pub fn empty() -> Plan {
        Plan {
            desc: std::ptr::null_mut(),
            a: std::ptr::null_mut(),
            b: std::ptr::null_mut(),
            c: std::ptr::null_mut(),
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
            workspace: 0,
        }
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: each non-null handle was created for this plan and is
        // destroyed once; a failed destroy leaks it.
        unsafe {
            if !self.desc.is_null() {
                let _ = result::destroy_matmul_desc(self.desc);
            }
            for l in [self.a, self.b, self.c] {
                if !l.is_null() {
                    let _ = result::destroy_matrix_layout(l);
                }
            }
        }
    }
}

pub(super) fn lt_err(e: result::CublasError) -> CudaError {
    CudaError::Blas(format!("cuBLASLt: {e}"))
}

fn data_type(d: Dtype) -> sys::cudaDataType {
    match d {
        Dtype::F32 => sys::cudaDataType::CUDA_R_32F,
        Dtype::F16 => sys::cudaDataType::CUDA_R_16F,
        Dtype::Bf16 => sys::cudaDataType::CUDA_R_16BF,
    }
}

/// A cuBLASLt handle on one stream, its workspace and its plans.
pub(super) struct Lt {
    pub(super) handle: sys::cublasLtHandle_t,
    pub(super) stream: sys::cudaStream_t,
    pub(super) workspace: u64,
    plans: Mutex<Plans>,
}

// SAFETY: the handle and the plans' descriptors are used under the `plans`
// lock only; the workspace is used by one matmul at a time on the stream.
unsafe impl Send for Lt {}
unsafe impl Sync for Lt {}

impl Lt {
    /// A handle for `stream` (its context current) and its workspace.
    pub fn new(stream: CUstream) -> Result<Self, CudaError> {
        // SAFETY: only tries to dlopen candidate library names.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::LibraryMissing {
                library: "cuBLASLt (libcublasLt.so.13)",
                hint: "it comes with cuBLAS (CUDA 13 toolkit or the PyPI package nvidia-cublas)",
            });
        }
        let handle = result::create_handle().map_err(lt_err)?;
        // SAFETY: the caller's context is current; freed in Drop.
        let workspace = match unsafe { cudarc::driver::result::malloc_sync(WORKSPACE_BYTES) } {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { result::destroy_handle(handle) };
                return Err(e.into());
            }
        };
        Ok(Lt {
            handle,
            stream: stream as sys::cudaStream_t,
            workspace,
            plans: Mutex::new(Capped::new(MAX_PLANS)),
        })
    }

    /// Bytes of the device workspace.
    pub fn workspace_bytes(&self) -> usize {
        WORKSPACE_BYTES
    }

    /// Plans kept.
    pub fn plans(&self) -> usize {
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// `y = x · Wᵀ + beta · y` (f32 compute) on the plan of `s`; `Ok(false)`
    /// when cuBLASLt has no algorithm for it (nothing was launched).
    ///
    /// # Safety
    /// `w`, `x` and `y` must address `out·in`, `rows·in` and `rows·out`
    /// elements of the dtypes of `s`, at the alignments of `s`.
    pub unsafe fn matmul(
        &self,
        s: &LtShape,
        w: u64,
        x: u64,
        y: u64,
        beta: f32,
    ) -> Result<bool, CudaError> {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let Some(plan) = plans.get_or_try_insert(*s, || self.plan(s))? else {
            return Ok(false);
        };
        let alpha = 1f32;
        result::matmul(
            self.handle,
            plan.desc,
            &alpha as *const f32 as *const c_void,
            &beta as *const f32 as *const c_void,
            w as *const c_void,
            plan.a,
            x as *const c_void,
            plan.b,
            y as *const c_void,
            plan.c,
            y as *mut c_void,
            plan.c,
            &plan.algo,
            self.workspace as *mut c_void,
            plan.workspace,
            self.stream,
        )
        .map_err(lt_err)?;
        Ok(true)
    }

    /// The descriptors of `s` and the heuristic's first algorithm; `None`
    /// when the heuristic has none.
    fn plan(&self, s: &LtShape) -> Result<Option<Plan>, CudaError> {
        let dim =
            |v: usize| u64::try_from(v).map_err(|_| CudaError::Blas(format!("GEMM dimension {v}")));
        let ld = |v: usize| {
            i64::try_from(v).map_err(|_| CudaError::Blas(format!("leading dimension {v}")))
        };
        let (m, n, k) = (s.out_features, s.rows, s.in_features);
        let mut plan = Plan::empty();
        plan.desc = result::create_matmul_desc(
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            sys::cudaDataType::CUDA_R_32F,
        )
        .map_err(lt_err)?;
        // cublasOperation_t (an int32 enum, declared by cuBLAS's bindings).
        let trans = cudarc::cublas::sys::cublasOperation_t::CUBLAS_OP_T as i32;
        // SAFETY: the descriptor is live; the value outlives the call.
        unsafe {
            result::set_matmul_desc_attribute(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                &trans as *const _ as *const c_void,
                std::mem::size_of::<i32>(),
            )
            .map_err(lt_err)?;
        }
        // Column-major: A = W as [in][out] (transposed by TRANSA), B = x as
        // [in][rows], C = D = y as [out][rows].
        plan.a = result::create_matrix_layout(data_type(s.w), dim(k)?, dim(m)?, ld(k)?)
            .map_err(lt_err)?;
        plan.b = result::create_matrix_layout(data_type(s.x), dim(k)?, dim(n)?, ld(k)?)
            .map_err(lt_err)?;
        plan.c = result::create_matrix_layout(data_type(s.y), dim(m)?, dim(n)?, ld(m)?)
            .map_err(lt_err)?;
        let pref = Pref::new(WORKSPACE_BYTES, s.align)?;
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
            Ok(h) if h.workspaceSize <= WORKSPACE_BYTES => {
                plan.algo = h.algo;
                plan.workspace = h.workspaceSize;
                Ok(Some(plan))
            }
            // No algorithm (or an unusable one): the caller takes cublasGemmEx.
            _ => Ok(None),
        }
    }
}

/// A matmul preference, destroyed on drop.
pub(super) struct Pref(pub sys::cublasLtMatmulPreference_t);

impl Pref {
    /// A preference for algorithms using at most `workspace` bytes and the
    /// alignments (bytes) of A, B and C = D.
    pub fn new(workspace: usize, align: [usize; 3]) -> Result<Pref, CudaError> {
        use sys::cublasLtMatmulPreferenceAttributes_t as A;
        let pref = Pref(result::create_matmul_pref().map_err(lt_err)?);
        let max = workspace as u64;
        // SAFETY: the preference is live; the value (uint64_t) outlives the call.
        unsafe {
            result::set_matmul_pref_attribute(
                pref.0,
                A::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &max as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            )
        }
        .map_err(lt_err)?;
        let [aw, ax, ay] = align.map(|a| a as u32);
        for (attr, v) in [
            (A::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, aw),
            (A::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, ax),
            (A::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, ay),
            (A::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, ay),
        ] {
            // SAFETY: as above; the alignments are uint32_t attributes.
            unsafe {
                result::set_matmul_pref_attribute(
                    pref.0,
                    attr,
                    &v as *const u32 as *const c_void,
                    std::mem::size_of::<u32>(),
                )
            }
            .map_err(lt_err)?;
        }
        Ok(pref)
    }
}

impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: created by create_matmul_pref, destroyed once.
        let _ = unsafe { result::destroy_matmul_pref(self.0) };
    }
}

impl Drop for Lt {
    fn drop(&mut self) {
        // Plans first (their descriptors), then the workspace and the handle.
        self.plans
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .map
            .clear();
        // SAFETY: allocated and created in `new`, released once.
        unsafe {
            let _ = cudarc::driver::result::free_sync(self.workspace);
            let _ = result::destroy_handle(self.handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment_is_the_largest_power_of_two_up_to_256() {
        assert_eq!(alignment(0), 256);
        assert_eq!(alignment(0x7f00_0000_0000), 256);
        assert_eq!(alignment(0x7f00_0000_0080), 128);
        assert_eq!(alignment(0x7f00_0000_0010), 16);
        assert_eq!(alignment(0x7f00_0000_0002), 2);
        assert_eq!(alignment(0x7f00_0000_0003), 1);
    }

    #[test]
    fn a_plan_is_made_once_per_key_and_the_cache_starts_over_past_its_cap() {
        let mut c: Capped<u32, u32> = Capped::new(2);
        let mut made = 0;
        let mut get = |c: &mut Capped<u32, u32>, k: u32| {
            *c.get_or_try_insert(k, || {
                made += 1;
                Ok::<_, ()>(k * 10)
            })
            .unwrap()
        };
        assert_eq!(get(&mut c, 1), 10);
        assert_eq!(get(&mut c, 1), 10);
        assert_eq!(get(&mut c, 2), 20);
        assert_eq!(c.len(), 2);
        // A third key: the cache starts over with it alone.
        assert_eq!(get(&mut c, 3), 30);
        assert_eq!(c.len(), 1);
        assert_eq!(get(&mut c, 1), 10);
        assert_eq!(made, 4);
        // A failed make keeps nothing.
        assert!(c.get_or_try_insert(9, || Err::<u32, _>("no")).is_err());
        assert_eq!(c.len(), 2);
    }
}
