//! cuBLASLt for the row-major linear ([`super::Blas::linear`]): one handle,
//! one device workspace, and a plan per distinct shape — the matmul
//! descriptor, the three matrix layouts and the algorithm — built on the
//! shape's first call and kept ([`Plans`]), so a repeated shape costs a hash
//! lookup and one `cublasLtMatmul`. A shape the heuristic has no algorithm
//! for is remembered as such and runs on `cublasGemmEx` (the caller's
//! fallback).
//!
//! The heuristic is asked once per row bucket ([`row_bucket`]: exact up to
//! 16 rows, then quarter octaves), not per
//! row count: on the first call of a weight shape (out, in, dtypes,
//! alignments) it runs for every bucket at once ([`Algos`]), and a new row
//! count then only makes its descriptors and checks the bucket's algorithm
//! on them (`cublasLtMatmulAlgoCheck`). A server sees new row counts all
//! the time (prefill chunks, decode batches); each heuristic call on the
//! hot path was a step's latency spike.

use super::Scratch;
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
/// Row counts up to this have a bucket of their own.
const EXACT_ROWS: usize = 16;
/// The largest bucket planned ahead on a shape's first call (rows beyond it
/// get their bucket's heuristic when they come).
const PLANNED_ROWS: usize = 1 << 15;
/// Most bucket algorithms kept.
const MAX_ALGOS: usize = 4096;
/// Scratch for launching each planned bucket's algorithm once (x then y):
/// the first launch of a cuBLAS kernel loads it, which a serving step
/// should not wait for. Buckets whose x and y do not fit are not launched.
const WARM_BYTES: usize = 64 << 20;

/// The bucket whose algorithm a GEMM of `rows` rows runs: `rows` itself up
/// to [`EXACT_ROWS`], else `rows` rounded up to a quarter of its octave
/// (the multiples of 2^k / 4 between 2^k and 2^(k+1): 17..=20 -> 20,
/// 200 -> 224, 700 -> 768), so a bucket's algorithm was chosen for at most
/// 25 % more rows than it runs.
pub(super) fn row_bucket(rows: usize) -> usize {
    if rows <= EXACT_ROWS {
        return rows;
    }
    let octave = 1usize << (usize::BITS - 1 - rows.leading_zeros());
    let step = octave / 4;
    rows.div_ceil(step).saturating_mul(step)
}

/// Every bucket up to [`PLANNED_ROWS`], smallest first.
fn planned_buckets() -> impl Iterator<Item = usize> {
    let mut next = 1;
    std::iter::from_fn(move || {
        let b = next;
        next = row_bucket(b + 1);
        (b <= PLANNED_ROWS).then_some(b)
    })
}

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

    pub fn contains(&self, k: &K) -> bool {
        self.map.contains_key(k)
    }
}

type Plans = Capped<LtShape, Option<Plan>>;
/// The heuristic's algorithm per bucketed shape (`rows` = the bucket);
/// `None`: it had none.
type Algos = Capped<LtShape, Option<Found>>;

/// An algorithm and the workspace it needs.
#[derive(Clone, Copy)]
struct Found {
    algo: sys::cublasLtMatmulAlgo_t,
    workspace: usize,
}

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

impl Plan {
    /// The descriptor (f32 compute, A transposed) and layouts of the
    /// row-major linear `y = x · Wᵀ` with y `[rows][out]`, in column-major
    /// terms: A = W as `[in][out]`, B = x as `[in][rows]`, C = D = y as
    /// `[out][rows]`; `types` are W's, x's and y's (no algorithm yet).
    pub fn linear(
        types: [sys::cudaDataType; 3],
        out: usize,
        rows: usize,
        inp: usize,
    ) -> Result<Plan, CudaError> {
        let dim =
            |v: usize| u64::try_from(v).map_err(|_| CudaError::Blas(format!("GEMM dimension {v}")));
        let ld = |v: usize| {
            i64::try_from(v).map_err(|_| CudaError::Blas(format!("leading dimension {v}")))
        };
        let [tw, tx, ty] = types;
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
        plan.a =
            result::create_matrix_layout(tw, dim(inp)?, dim(out)?, ld(inp)?).map_err(lt_err)?;
        plan.b =
            result::create_matrix_layout(tx, dim(inp)?, dim(rows)?, ld(inp)?).map_err(lt_err)?;
        plan.c =
            result::create_matrix_layout(ty, dim(out)?, dim(rows)?, ld(out)?).map_err(lt_err)?;
        Ok(plan)
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
    pub(super) workspace: Scratch,
    /// [`WARM_BYTES`] of scratch for the buckets' first launches, zeroed
    /// once: the warm-up launches read it (`plan_buckets`), and
    /// compute-sanitizer's initcheck would report a read of memory no one
    /// wrote.
    warm: Scratch,
    plans: Mutex<(Plans, Algos)>,
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
        let scratch =
            Scratch::new(WORKSPACE_BYTES).and_then(|w| Ok((w, Scratch::zeroed(WARM_BYTES)?)));
        let (workspace, warm) = match scratch {
            Ok(both) => both,
            Err(e) => {
                // SAFETY: created above, destroyed once.
                let _ = unsafe { result::destroy_handle(handle) };
                return Err(e);
            }
        };
        Ok(Lt {
            handle,
            stream: stream as sys::cudaStream_t,
            workspace,
            warm,
            plans: Mutex::new((Capped::new(MAX_PLANS), Capped::new(MAX_ALGOS))),
        })
    }

    /// Bytes of the device workspace.
    pub fn workspace_bytes(&self) -> usize {
        WORKSPACE_BYTES
    }

    /// Plans kept.
    pub fn plans(&self) -> usize {
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).0.len()
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
        let mut guard = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        let (plans, algos) = &mut *guard;
        let Some(plan) = plans.get_or_try_insert(*s, || self.plan(s, w, algos))? else {
            return Ok(false);
        };
        self.launch(plan, w, x, y, beta)?;
        Ok(true)
    }

    /// `plan`'s GEMM on the stream.
    ///
    /// # Safety
    /// As [`Lt::matmul`], for `plan`'s shape.
    unsafe fn launch(
        &self,
        plan: &Plan,
        w: u64,
        x: u64,
        y: u64,
        beta: f32,
    ) -> Result<(), CudaError> {
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
            self.workspace.ptr() as *mut c_void,
            plan.workspace,
            self.stream,
        )
        .map_err(lt_err)
    }

    /// The descriptors of `s` and its bucket's algorithm when that runs
    /// `s` (else the heuristic's own for `s`); `None` when the heuristic
    /// has none.
    fn plan(&self, s: &LtShape, w: u64, algos: &mut Algos) -> Result<Option<Plan>, CudaError> {
        let bucket = LtShape {
            rows: row_bucket(s.rows),
            ..*s
        };
        if !algos.contains(&bucket) {
            self.plan_buckets(s, w, algos)?;
        }
        let from_bucket = *algos.get_or_try_insert(bucket, || self.heuristic(&bucket))?;
        let mut plan = self.descriptors(s)?;
        if let Some(f) = from_bucket.filter(|f| self.runs(&plan, f)) {
            plan.algo = f.algo;
            plan.workspace = f.workspace;
            return Ok(Some(plan));
        }
        Ok(self.search(&plan, s)?.map(|f| {
            plan.algo = f.algo;
            plan.workspace = f.workspace;
            plan
        }))
    }

    /// The heuristic's algorithm for every planned bucket of `s`'s weight
    /// shape (its first call, weight `w`), each launched once on scratch
    /// when its x and y fit [`WARM_BYTES`], so its kernel is loaded.
    fn plan_buckets(&self, s: &LtShape, w: u64, algos: &mut Algos) -> Result<(), CudaError> {
        let started = std::time::Instant::now();
        let mut launched = 0usize;
        for rows in planned_buckets() {
            let b = LtShape { rows, ..*s };
            if algos.contains(&b) {
                continue;
            }
            let mut plan = self.descriptors(&b)?;
            let found = self.search(&plan, &b)?;
            algos.get_or_try_insert(b, || Ok::<_, CudaError>(found))?;
            let Some(f) = found else { continue };
            let x_bytes = rows * s.in_features * s.x.size_bytes();
            let y_at = x_bytes.div_ceil(MAX_ALIGN) * MAX_ALIGN;
            if y_at + rows * s.out_features * s.y.size_bytes() > WARM_BYTES {
                continue;
            }
            plan.algo = f.algo;
            plan.workspace = f.workspace;
            // SAFETY: x and y lie in the scratch (checked above), 256-byte
            // aligned; `w` is the caller's weight of this shape.
            unsafe {
                self.launch(
                    &plan,
                    w,
                    self.warm.ptr(),
                    self.warm.ptr() + y_at as u64,
                    0.0,
                )?
            };
            launched += 1;
        }
        tracing::debug!(
            out_features = s.out_features,
            in_features = s.in_features,
            launched,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "cuBLASLt: planned every row bucket of a new weight shape"
        );
        Ok(())
    }

    /// The heuristic's first algorithm for `s`.
    fn heuristic(&self, s: &LtShape) -> Result<Option<Found>, CudaError> {
        let plan = self.descriptors(s)?;
        self.search(&plan, s)
    }

    /// Whether `f` runs the GEMM `plan` describes (`cublasLtMatmulAlgoCheck`)
    /// within the workspace.
    fn runs(&self, plan: &Plan, f: &Found) -> bool {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut out: sys::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        // SAFETY: every descriptor is live and describes the same GEMM; the
        // algorithm and the result outlive the call.
        let status = unsafe {
            sys::cublasLtMatmulAlgoCheck(
                self.handle,
                plan.desc,
                plan.a,
                plan.b,
                plan.c,
                plan.c,
                &f.algo,
                &mut out,
            )
        };
        status == sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS && out.workspaceSize <= WORKSPACE_BYTES
    }

    /// `s`'s matmul descriptor and matrix layouts (no algorithm yet).
    fn descriptors(&self, s: &LtShape) -> Result<Plan, CudaError> {
        Plan::linear(
            [data_type(s.w), data_type(s.x), data_type(s.y)],
            s.out_features,
            s.rows,
            s.in_features,
        )
    }

    /// The heuristic's first algorithm for the GEMM `plan` describes, at
    /// `s`'s alignments; `None` when it has none (or one needing more than
    /// the workspace).
    fn search(&self, plan: &Plan, s: &LtShape) -> Result<Option<Found>, CudaError> {
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
            Ok(h) if h.workspaceSize <= WORKSPACE_BYTES => Ok(Some(Found {
                algo: h.algo,
                workspace: h.workspaceSize,
            })),
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
        // Plans first (their descriptors), then the handle, then (as fields)
        // the workspace and the scratch.
        self.plans
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .map
            .clear();
        // SAFETY: created in `new`, destroyed once, before the workspace
        // and the scratch (fields, dropped after this).
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

#[cfg(test)]
#[path = "lt_tests.rs"]
mod tests;
