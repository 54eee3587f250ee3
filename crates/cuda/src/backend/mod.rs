//! `CudaBackend`: the backend op set (`headroom_core::Backend`) on one CUDA
//! device, each trait method mapped onto an op of `crate::ops`. Activations
//! are bf16 device buffers (f32 where precision needs it: the residual stream
//! from `embed` through every `add_rms_norm`, `g` / `beta`, router logits),
//! matrices bf16, vectors f32; everything is queued on the device's one
//! stream (a buffer dropped on the host is reused only by later work of that
//! stream). Here besides the mapping: [`open`] (opening it), [`memory`] (uploads, synthetic
//! weights), [`state`] (pools), [`supports`], [`comm`] and [`group`] (tensor
//! parallelism), and the GDN / MoE glue ([`gdn`], [`moe`], [`moe_partial`],
//! [`external`]); the conv1d, the fused GDN decode core, the MoE decode path
//! and the shape-general fallbacks are ops of `crate::ops`.

mod comm;
mod external;
mod gdn;
mod group;
pub(crate) mod memory;
mod moe;
mod moe_partial;
mod open;
mod state;
mod supports;

pub use crate::tensor::{
    CudaAct, CudaGdnState, CudaKvCache, CudaWeight, CudaWeightFormat, Fp8Scales,
};
pub use group::{open_group, open_group_with};

// The paths the GDN / MoE modules import their plumbing by.
pub(crate) use crate::{launch, tensor as types, validate};
mod dense {
    pub(crate) use crate::ops::linear::linear;
    pub(crate) use crate::ops::pointwise::swiglu;
}

use crate::device::CudaDevice;
use crate::graph::{DeviceGraphs, Exec, GraphStats, StepGraphs};
use crate::ops::attention::{cache as attention, prep as attention_prep};
use crate::ops::{kv, linear, norm, pointwise, rope, sample};
use headroom_core::ops::{
    AttentionPrepWeights, Backend, Batch, GdnCoreInputs, GdnCoreWeights, GdnSpec, KvSpec, MoeSpec,
    MoeWeights, OpError, OpKey, OpResult, RopeSpec, SamplingParams, StepKey, TimelineMark,
    WeightInit,
};
use headroom_core::{AttentionReport, BackendKind, Dtype, RouteRequest, Tensor};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The op set on one CUDA device.
pub struct CudaBackend {
    /// The tensor-parallel group this backend is a rank of (`crate::nccl`).
    /// Declared first so it is destroyed first (fields drop in order), while
    /// the device's context, stream and cuBLAS handle still exist.
    comm: Option<crate::nccl::NcclComm>,
    /// Decode steps recorded as CUDA graphs (`crate::graph`; off until
    /// `Backend::set_step_recording`). Before the device: the executable
    /// graphs go before its stream.
    graphs: StepGraphs<Exec>,
    dev: CudaDevice,
    /// Peak bytes seen before the last call that restarted the allocator's own
    /// high-water mark (attention reports its transient bytes that way).
    earlier_peak: AtomicU64,
    /// One arithmetic for a row whatever else is in its step
    /// ([`Self::with_batch_invariant`]).
    batch_invariant: bool,
    /// An FP8 matrix was uploaded: the add + RMSNorm then writes its rows'
    /// e4m3 codes too (more rows than the FP8 GEMV takes), which the FP8
    /// projections and experts that read them take instead of quantizing.
    fp8_weights: AtomicBool,
}

impl CudaBackend {
    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// What the recording of decode steps as CUDA graphs did so far.
    pub fn graph_stats(&self) -> GraphStats {
        self.graphs.stats()
    }

    /// Whether a kept graph is updated to a new capture of its shape (the
    /// default) or every capture instantiates its own: the GPU tests
    /// compare the two (`crates/engine/tests/cuda_graphs.rs`, session 24).
    pub fn set_graph_updates(&self, on: bool) {
        self.graphs.set_updates(on);
    }

    /// The shared expert of an MoE block before its gate (`[t][hidden]`).
    pub fn shared_expert(&self, x: &CudaAct, w: &MoeWeights<CudaWeight>) -> OpResult<CudaAct> {
        moe::shared_expert(&self.dev, x, w)
    }

    /// Fills an activation with the byte `value` (0xFF: NaN in bf16 and f32), for tests.
    pub fn poison(&self, x: &mut CudaAct, value: u8) -> OpResult<()> {
        self.dev.fill_bytes(&x.buf, value).map_err(launch::dev_err)
    }

    /// The GDN core on the fused decode kernel; `Err` unless every sequence
    /// is one row and the shape is the kernel's (tests compare it with
    /// `headroom_core::ops::gdn_core_composed`).
    pub fn gdn_core_fused(
        &self,
        x: GdnCoreInputs<'_, CudaAct>,
        w: &GdnCoreWeights<'_, CudaWeight>,
        st: &mut CudaGdnState,
        batch: &Batch,
    ) -> OpResult<CudaAct> {
        crate::ops::gdn::decode::gdn_decode(&self.dev, &x, w, st, batch)
    }

    /// Attention over the KV block pool on the one-launch paged kernel
    /// (Hopper, head dim 64/128/256) with `splits` key splits forced
    /// (clamped to the kernel's range): what `attention` / `attention_gated`
    /// on the fused route run with the splits the plan picks. Returns the
    /// output and what ran.
    pub fn attention_paged_splits(
        &self,
        q: &CudaAct,
        cache: &CudaKvCache,
        batch: &Batch,
        gate: Option<&CudaAct>,
        splits: usize,
    ) -> OpResult<(CudaAct, crate::attention::PagedRun)> {
        if !attention::takes_paged(&self.dev, cache, RouteRequest::Fused) {
            return Err(OpError::Unsupported {
                op: "attention",
                reason: format!(
                    "the paged kernel needs sm_90a and head dim 64/128/256 ({}, {})",
                    self.dev.arch, cache.spec.head_dim
                ),
            });
        }
        attention::paged(&self.dev, q, cache, batch, gate, Some(splits))
    }

    /// The attention prep on the fused decode kernel; `Err` unless every
    /// sequence is one row and the shape is the kernel's.
    pub fn attention_prep_fused(
        &self,
        q: &mut CudaAct,
        k: &mut CudaAct,
        v: &CudaAct,
        w: &AttentionPrepWeights<'_, CudaWeight>,
        cache: &mut CudaKvCache,
        batch: &Batch,
    ) -> OpResult<()> {
        attention_prep::attention_prep(&self.dev, q, k, v, w, cache, batch)
    }

    /// `x · W_iᵀ` for each of `ws` on the skinny GEMV (`gemv`, 1 ..= 8 rows)
    /// or on cuBLAS, one GEMM per matrix, outputs in `out` (bf16 or f32):
    /// tests and the side-by-side bench run both paths in one process.
    pub fn linear_with(
        &self,
        x: &CudaAct,
        ws: &[&CudaWeight],
        gemv: bool,
        out: Dtype,
    ) -> OpResult<Vec<CudaAct>> {
        linear::linear_with(&self.dev, x, ws, gemv, out)
    }

    /// Whether a norm of `rows` rows writes their FP8 codes too: an FP8
    /// matrix was uploaded, and more rows than the FP8 GEMV (which reads
    /// bf16) takes.
    fn writes_fp8_codes(&self, rows: usize) -> bool {
        self.fp8_weights.load(Ordering::Relaxed) && rows > crate::ops::fp8::gemv::MAX_ROWS
    }

    fn save_peak(&self) {
        self.earlier_peak
            .fetch_max(self.dev.allocator().stats().peak, Ordering::Relaxed);
    }
}

impl Backend for CudaBackend {
    type Act = CudaAct;
    type Weight = CudaWeight;
    type KvCache = CudaKvCache;
    type GdnState = CudaGdnState;
    /// Drawn on the device, read after the next step is queued.
    type Drawn = sample::Drawn;

    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn act_dtype(&self) -> Dtype {
        Dtype::Bf16
    }

    fn supports(&self, op: &OpKey) -> Result<(), String> {
        supports::supports(op)
    }

    fn upload_matrix(&self, t: Tensor) -> OpResult<CudaWeight> {
        let w = memory::upload_matrix(&self.dev, t)?;
        if w.is_fp8() {
            self.fp8_weights.store(true, Ordering::Relaxed);
        }
        Ok(w)
    }

    fn upload_vector(&self, t: Tensor) -> OpResult<CudaWeight> {
        memory::upload_vector(&self.dev, t)
    }

    fn init_matrix(&self, rows: usize, cols: usize, init: WeightInit) -> OpResult<CudaWeight> {
        memory::init_matrix(&self.dev, rows, cols, init)
    }

    fn act_from_f32(&self, rows: usize, cols: usize, data: &[f32]) -> OpResult<CudaAct> {
        memory::act_from_f32(&self.dev, rows, cols, data)
    }

    fn act_to_f32(&self, x: &CudaAct) -> OpResult<Vec<f32>> {
        memory::act_to_f32(&self.dev, x)
    }

    fn act_shape(&self, x: &CudaAct) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn memory(&self) -> (usize, usize) {
        let s = self.dev.allocator().stats();
        let peak = s.peak.max(self.earlier_peak.load(Ordering::Relaxed));
        (s.active as usize, peak as usize)
    }

    fn memory_reserved(&self) -> usize {
        self.dev.allocator().stats().reserved as usize
    }

    fn release_cached_memory(&self) {
        self.dev.allocator().empty_cache();
    }

    fn memory_driver_calls(&self) -> (u64, u64) {
        let s = self.dev.allocator().stats();
        (s.driver_allocs, s.driver_frees)
    }

    fn reset_peak_memory(&self) {
        self.dev.allocator().reset_peak();
        self.earlier_peak.store(0, Ordering::Relaxed);
    }

    fn synchronize(&self) -> OpResult<()> {
        self.dev.synchronize().map_err(launch::dev_err)
    }

    fn timeline_mark(&self) -> OpResult<TimelineMark> {
        crate::event::timeline_mark(&self.dev).map_err(launch::dev_err)
    }

    fn timeline_seconds(&self, from: &TimelineMark, to: &TimelineMark) -> OpResult<f64> {
        crate::event::timeline_seconds(from, to)
    }

    fn step_recording(&self) -> Result<(), String> {
        if self.comm.is_some() {
            return Err(
                "a tensor-parallel rank's steps hold NCCL calls, which are not recorded".into(),
            );
        }
        Ok(())
    }

    fn set_step_recording(&self, on: bool) {
        if self.step_recording().is_ok() {
            self.graphs.set_on(on);
        }
    }

    fn queue_step<T, E: std::fmt::Display>(
        &self,
        key: StepKey,
        queue: impl FnOnce() -> Result<T, E>,
    ) -> OpResult<Result<T, E>> {
        self.graphs.queue(&DeviceGraphs(&self.dev), key, queue)
    }

    fn workspace_model(&self) -> std::sync::Arc<dyn headroom_core::ops::WorkspaceModel> {
        std::sync::Arc::new(memory::CudaWorkspace {
            paged: crate::attention::fused_impl(&self.dev.arch)
                == crate::attention::FusedImpl::Wgmma,
            arch: self.dev.arch.clone(),
        })
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> OpResult<CudaKvCache> {
        state::new_kv_cache(&self.dev, spec)
    }

    fn new_gdn_state(&self, spec: &GdnSpec) -> OpResult<CudaGdnState> {
        state::new_gdn_state(&self.dev, spec)
    }

    fn reset_kv_slot(&self, cache: &mut CudaKvCache, slot: usize) -> OpResult<()> {
        state::reset_kv_slot(cache, slot)
    }

    fn reset_gdn_slot(&self, st: &mut CudaGdnState, slot: usize) -> OpResult<()> {
        state::reset_gdn_slot(&self.dev, st, slot)
    }

    fn copy_kv_slot(&self, cache: &mut CudaKvCache, from: usize, to: usize) -> OpResult<()> {
        state::copy_kv_slot(cache, from, to)
    }

    fn copy_gdn_slot(&self, st: &mut CudaGdnState, from: usize, to: usize) -> OpResult<()> {
        state::copy_gdn_slot(&self.dev, st, from, to)
    }

    fn copy_gdn_slots(
        &self,
        states: &mut [&mut CudaGdnState],
        from: usize,
        to: usize,
    ) -> OpResult<()> {
        state::copy_gdn_slots(&self.dev, states, from, to)
    }

    fn kv_len(&self, cache: &CudaKvCache, slot: usize) -> usize {
        cache.lens.get(slot).copied().unwrap_or(0)
    }

    fn embed(&self, table: &CudaWeight, ids: &[u32]) -> OpResult<CudaAct> {
        pointwise::embed(&self.dev, table, ids)
    }

    fn linear(&self, x: &CudaAct, w: &CudaWeight) -> OpResult<CudaAct> {
        linear::linear(&self.dev, x, w, Dtype::Bf16)
    }

    /// One GEMV launch for all of `ws` at 1 ..= 8 rows (`gemv`).
    fn linear_many(&self, x: &CudaAct, ws: &[&CudaWeight]) -> OpResult<Vec<CudaAct>> {
        linear::linear_many(&self.dev, x, ws)
    }

    fn add_rms_norm(
        &self,
        residual: &mut CudaAct,
        delta: Option<&CudaAct>,
        weight: &CudaWeight,
        eps: f32,
    ) -> OpResult<CudaAct> {
        let codes = self.writes_fp8_codes(residual.rows);
        norm::add_rms_norm(&self.dev, residual, delta, weight, eps, codes)
    }

    fn rms_norm_groups(&self, x: &mut CudaAct, weight: &CudaWeight, eps: f32) -> OpResult<()> {
        norm::rms_norm_groups(&self.dev, x, weight, eps)
    }

    fn gated_rms_norm(
        &self,
        x: &mut CudaAct,
        z: &CudaAct,
        weight: &CudaWeight,
        eps: f32,
    ) -> OpResult<()> {
        let codes = self.writes_fp8_codes(x.rows);
        norm::gated_rms_norm(&self.dev, x, z, weight, eps, codes)
    }

    fn rope(
        &self,
        x: &mut CudaAct,
        heads: usize,
        head_dim: usize,
        spec: &RopeSpec,
        batch: &Batch,
    ) -> OpResult<()> {
        rope::rope(&self.dev, x, heads, head_dim, spec, batch)
    }

    fn conv1d_silu(
        &self,
        x: &CudaAct,
        w: &CudaWeight,
        st: &mut CudaGdnState,
        batch: &Batch,
    ) -> OpResult<CudaAct> {
        crate::ops::conv::conv1d_silu(&self.dev, x, w, st, batch)
    }

    fn gdn_gating(
        &self,
        a: &CudaAct,
        b: &CudaAct,
        a_log: &CudaWeight,
        dt_bias: &CudaWeight,
    ) -> OpResult<(CudaAct, CudaAct)> {
        pointwise::gdn_gating(&self.dev, a, b, a_log, dt_bias)
    }

    fn gated_delta_rule(
        &self,
        qkv: &CudaAct,
        g: &CudaAct,
        beta: &CudaAct,
        st: &mut CudaGdnState,
        batch: &Batch,
    ) -> OpResult<CudaAct> {
        gdn::gated_delta_rule(&self.dev, qkv, g, beta, st, batch)
    }

    /// One fused launch for all-decode batches (`gdn_decode`), else the composition.
    fn gdn_core(
        &self,
        x: GdnCoreInputs<'_, CudaAct>,
        w: &GdnCoreWeights<'_, CudaWeight>,
        st: &mut CudaGdnState,
        batch: &Batch,
    ) -> OpResult<CudaAct> {
        if crate::ops::gdn::decode::takes(&x, w, st, batch) {
            crate::ops::gdn::decode::gdn_decode(&self.dev, &x, w, st, batch)
        } else {
            headroom_core::ops::gdn_core_composed(self, x, w, st, batch)
        }
    }

    /// One fused launch for all-decode batches (`attention_prep`), else the composition.
    fn attention_prep(
        &self,
        q: &mut CudaAct,
        k: &mut CudaAct,
        v: &CudaAct,
        w: &AttentionPrepWeights<'_, CudaWeight>,
        cache: &mut CudaKvCache,
        batch: &Batch,
    ) -> OpResult<()> {
        if attention_prep::takes(q, k, v, w, cache, batch) {
            attention_prep::attention_prep(&self.dev, q, k, v, w, cache, batch)
        } else {
            headroom_core::ops::attention_prep_composed(self, q, k, v, w, cache, batch)
        }
    }

    fn kv_write(
        &self,
        cache: &mut CudaKvCache,
        k: &CudaAct,
        v: &CudaAct,
        batch: &Batch,
    ) -> OpResult<()> {
        kv::kv_write(&self.dev, cache, k, v, batch)
    }

    fn attention(
        &self,
        q: &CudaAct,
        cache: &CudaKvCache,
        batch: &Batch,
        route: RouteRequest,
    ) -> OpResult<(CudaAct, AttentionReport)> {
        self.save_peak();
        attention::attention(&self.dev, q, cache, batch, route, None)
    }

    fn attention_gated(
        &self,
        q: &CudaAct,
        cache: &CudaKvCache,
        batch: &Batch,
        route: RouteRequest,
        gate: &CudaAct,
    ) -> OpResult<(CudaAct, AttentionReport)> {
        self.save_peak();
        attention::attention(&self.dev, q, cache, batch, route, Some(gate))
    }

    fn mul_sigmoid(&self, x: &mut CudaAct, gate: &CudaAct) -> OpResult<()> {
        pointwise::mul_sigmoid(&self.dev, x, gate)
    }

    fn swiglu(&self, gate: &CudaAct, up: &CudaAct) -> OpResult<CudaAct> {
        pointwise::swiglu(&self.dev, gate, up)
    }

    fn moe(&self, x: &CudaAct, w: &MoeWeights<CudaWeight>, spec: &MoeSpec) -> OpResult<CudaAct> {
        moe::moe(&self.dev, x, w, spec, self.batch_invariant)
    }

    fn world_size(&self) -> usize {
        self.comm.as_ref().map_or(1, |c| c.world)
    }

    /// f32 inside a group, plain bf16 `linear` outside (`comm`).
    fn linear_partial(&self, x: &CudaAct, w: &CudaWeight) -> OpResult<CudaAct> {
        comm::linear_partial(&self.dev, self.comm.as_ref(), x, w)
    }

    /// f32 inside a group ([`moe_partial`]), plain bf16 `moe` outside.
    fn moe_partial(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
    ) -> OpResult<CudaAct> {
        match self.comm {
            Some(_) => moe_partial::moe_f32(&self.dev, x, w, spec),
            None => moe::moe(&self.dev, x, w, spec, self.batch_invariant),
        }
    }

    fn add_rms_norm_moe_partial(
        &self,
        residual: &mut CudaAct,
        delta: &CudaAct,
        norm: &CudaWeight,
        eps: f32,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
    ) -> OpResult<CudaAct> {
        if self.decodes_after_norm(residual, delta, norm, w, spec) {
            return crate::ops::moe::decode::moe_decode_after_norm(
                &self.dev, residual, delta, norm, eps, w, spec,
            );
        }
        let normed = self.add_rms_norm(residual, Some(delta), norm, eps)?;
        self.moe_partial(&normed, w, spec)
    }

    /// The next norm folded into the block's combine where the grouped-GEMM
    /// path runs (`moe::moe_then`), elsewhere the calls: `moe.rs`.
    fn add_rms_norm_moe_add_rms_norm(
        &self,
        residual: &mut CudaAct,
        delta: &CudaAct,
        norm: &CudaWeight,
        eps: f32,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
        next_norm: &CudaWeight,
    ) -> OpResult<CudaAct> {
        self.moe_then_next_norm(residual, delta, norm, eps, w, spec, next_norm)
    }

    fn all_reduce_sum(&self, x: &mut CudaAct) -> OpResult<()> {
        comm::all_reduce_sum(&self.dev, self.comm.as_ref(), x)
    }

    fn all_gather_cols(&self, x: CudaAct) -> OpResult<CudaAct> {
        comm::all_gather_cols(&self.dev, self.comm.as_ref(), x)
    }

    fn gather_rows(&self, x: &CudaAct, rows: &[usize]) -> OpResult<CudaAct> {
        pointwise::gather_rows(&self.dev, x, rows)
    }

    fn sample(
        &self,
        logits: &CudaAct,
        params: &[SamplingParams],
        steps: &[u64],
    ) -> OpResult<Vec<u32>> {
        sample::sample(&self.dev, logits, params, steps)
    }

    fn sample_later(
        &self,
        logits: &CudaAct,
        params: &[SamplingParams],
        steps: &[u64],
    ) -> OpResult<sample::Drawn> {
        sample::sample_later(&self.dev, logits, params, steps)
    }

    fn read_drawn(&self, drawn: &sample::Drawn) -> OpResult<Vec<u32>> {
        drawn.read(&self.dev)
    }

    fn embed_drawn(
        &self,
        table: &CudaWeight,
        ids: &[u32],
        holes: &[(usize, usize)],
        drawn: &sample::Drawn,
    ) -> OpResult<CudaAct> {
        pointwise::embed_drawn(&self.dev, table, ids, holes, drawn)
    }
}
