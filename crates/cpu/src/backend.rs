//! [`CpuBackend`]: the backend op set on the CPU, one method per op over the
//! functions of [`crate::ops`]. Activations are f32 [`CpuAct`]s; weights stay
//! in their storage dtype ([`CpuWeight`]). A [`Precision`] other than f32
//! rounds matrices and op outputs to bf16 where the CUDA backend stores bf16
//! (see [`crate::precision`]). The larger ops live in the child modules
//! `attention`, `gdn`, `kv`, `moe` and `norm`; uploads, state pools and the
//! byte counters in `memory`.

pub(crate) use crate::act::{batch_rows, groups_of, same_shape};
pub use crate::act::{CpuAct, CpuWeight};

mod attention;
mod gdn;
mod kv;
mod memory;
mod moe;
mod norm;

use crate::ops::activation::{sigmoid, swiglu};
use crate::ops::rope::Rope;
use crate::ops::{linear, WeightView};
use crate::precision::{ActRounding, Precision};
use crate::state::{CpuGdnState, CpuKvCache};
use headroom_core::fused_capability::fused_support;
use headroom_core::ops::{
    Backend, Batch, GdnSpec, KvSpec, MoeSpec, MoeWeights, OpError, OpKey, OpResult, RopeSpec,
    SamplingParams, WeightInit, WorkspaceModel,
};
use headroom_core::{AttentionReport, BackendKind, Dtype, RouteRequest, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The CPU backend. Tracks the bytes of its weights and state pools and the
/// peak transient bytes the attention kernels report.
#[derive(Debug, Default)]
pub struct CpuBackend {
    active: AtomicUsize,
    peak: AtomicUsize,
    /// The tensor-parallel group this backend is a rank of (`crate::comm`).
    group: Option<crate::comm::CpuRank>,
    precision: Precision,
    /// The last normed rows before their bf16 rounding, kept only when the
    /// emulation's router reads un-rounded rows (no `ROUTER_INPUT` site).
    unrounded_norm: std::sync::Mutex<Option<Vec<f32>>>,
}

impl CpuBackend {
    /// The f32 reference backend.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    /// A backend that is rank `rank.rank` of an in-process tensor-parallel group.
    pub fn in_group(rank: crate::comm::CpuRank) -> CpuBackend {
        CpuBackend {
            group: Some(rank),
            ..CpuBackend::default()
        }
    }

    /// Rank `rank.rank` of a group, computing in `precision` (the CUDA
    /// group's bf16 emulated: partials f32, the sum rounded once).
    pub fn in_group_with_precision(rank: crate::comm::CpuRank, precision: Precision) -> CpuBackend {
        CpuBackend {
            group: Some(rank),
            precision,
            ..CpuBackend::default()
        }
    }

    /// The MoE op's shape check (`supports`), as an op error.
    fn moe_supported(&self, spec: &MoeSpec) -> OpResult<()> {
        self.supports(&OpKey::Moe {
            num_experts: spec.num_experts,
            top_k: spec.top_k,
        })
        .map_err(|reason| OpError::Unsupported { op: "moe", reason })
    }

    /// A backend computing in `precision` (e.g. emulating the CUDA backend's
    /// bf16 storage: `Precision::bf16(ActRounding::ALL)`).
    pub fn with_precision(precision: Precision) -> CpuBackend {
        CpuBackend {
            precision,
            ..CpuBackend::default()
        }
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Rounds `x` to bf16 when this backend's precision rounds at `site`.
    pub(crate) fn round(&self, site: ActRounding, x: &mut [f32]) {
        self.precision.act.apply(site, x);
    }

    /// `x · Wᵀ` in f32, never rounded (router and gate logits stay f32 on CUDA).
    pub(crate) fn linear_f32(&self, x: &CpuAct, w: &CpuWeight) -> OpResult<CpuAct> {
        let w = w.view("linear")?;
        if x.cols != w.cols {
            return Err(OpError::shape(
                "linear",
                format!(
                    "input has {} columns, weight [{}][{}]",
                    x.cols, w.rows, w.cols
                ),
            ));
        }
        let mut out = CpuAct::zeros(x.rows, w.rows);
        linear(&x.data, x.rows, w, &mut out.data);
        Ok(out)
    }
}

impl Backend for CpuBackend {
    type Act = CpuAct;
    type Weight = CpuWeight;
    type KvCache = CpuKvCache;
    type GdnState = CpuGdnState;
    /// Drawn at once: the tokens themselves.
    type Drawn = Vec<u32>;

    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn act_dtype(&self) -> Dtype {
        Dtype::F32
    }

    fn supports(&self, op: &OpKey) -> Result<(), String> {
        match op {
            OpKey::Attention {
                route: RouteRequest::Fused,
                layer,
            } => {
                // Activations are f32 here whatever the checkpoint's dtype.
                let kind = headroom_core::LayerKind {
                    dtype: Dtype::F32,
                    ..*layer
                };
                fused_support(BackendKind::Cpu, &kind)
            }
            OpKey::Attention {
                route: RouteRequest::Composed { .. },
                layer,
            } => {
                if layer.kv_heads == 0 || !layer.q_heads.is_multiple_of(layer.kv_heads) {
                    return Err(format!(
                        "q_heads {} is not a multiple of kv_heads {}",
                        layer.q_heads, layer.kv_heads
                    ));
                }
                Ok(())
            }
            OpKey::Moe { num_experts, top_k } if *top_k == 0 || top_k > num_experts => {
                Err(format!("top_k {top_k} must be in 1..={num_experts}"))
            }
            _ => Ok(()),
        }
    }

    fn upload_matrix(&self, t: Tensor) -> OpResult<CpuWeight> {
        memory::upload_matrix(self, t)
    }

    fn upload_vector(&self, t: Tensor) -> OpResult<CpuWeight> {
        memory::upload_vector(self, t)
    }

    fn init_matrix(&self, rows: usize, cols: usize, init: WeightInit) -> OpResult<CpuWeight> {
        memory::init_matrix(self, rows, cols, init)
    }

    fn act_from_f32(&self, rows: usize, cols: usize, data: &[f32]) -> OpResult<CpuAct> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(OpError::shape(
                "act_from_f32",
                format!("{} values for [{rows}][{cols}]", data.len()),
            ));
        }
        Ok(CpuAct::new(rows, cols, data.to_vec()))
    }

    fn act_to_f32(&self, x: &CpuAct) -> OpResult<Vec<f32>> {
        Ok(x.data.clone())
    }

    fn act_shape(&self, x: &CpuAct) -> (usize, usize) {
        (x.rows, x.cols)
    }

    fn memory(&self) -> (usize, usize) {
        (
            self.active.load(Ordering::Relaxed),
            self.peak.load(Ordering::Relaxed),
        )
    }

    fn reset_peak_memory(&self) {
        self.peak
            .store(self.active.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn synchronize(&self) -> OpResult<()> {
        Ok(())
    }

    fn workspace_model(&self) -> Arc<dyn WorkspaceModel> {
        Arc::new(attention::CpuWorkspace::on_current_pool())
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> OpResult<CpuKvCache> {
        memory::new_kv_cache(spec)
    }

    fn new_gdn_state(&self, spec: &GdnSpec) -> OpResult<CpuGdnState> {
        memory::new_gdn_state(self, spec)
    }

    fn reset_kv_slot(&self, cache: &mut CpuKvCache, slot: usize) -> OpResult<()> {
        memory::reset_kv_slot(self, cache, slot)
    }

    fn reset_gdn_slot(&self, state: &mut CpuGdnState, slot: usize) -> OpResult<()> {
        memory::reset_gdn_slot(state, slot)
    }

    fn copy_kv_slot(&self, cache: &mut CpuKvCache, from: usize, to: usize) -> OpResult<()> {
        memory::copy_kv_slot(self, cache, from, to)
    }

    fn copy_gdn_slot(&self, state: &mut CpuGdnState, from: usize, to: usize) -> OpResult<()> {
        memory::copy_gdn_slot(state, from, to)
    }

    fn kv_len(&self, cache: &CpuKvCache, slot: usize) -> usize {
        cache.len(slot)
    }

    fn embed(&self, table: &CpuWeight, ids: &[u32]) -> OpResult<CpuAct> {
        let CpuWeight::Matrix(t) = table else {
            return Err(OpError::shape("embed", "the table is not a matrix"));
        };
        let w = WeightView::matrix(t);
        let mut out = CpuAct::zeros(ids.len(), w.cols);
        for (row, &id) in out.data.chunks_exact_mut(w.cols).zip(ids) {
            if id as usize >= w.rows {
                return Err(OpError::shape(
                    "embed",
                    format!("token id {id} >= vocab {}", w.rows),
                ));
            }
            t.read_f32(id as usize * w.cols, row);
        }
        self.round(ActRounding::RESIDUAL, &mut out.data);
        Ok(out)
    }

    fn linear(&self, x: &CpuAct, w: &CpuWeight) -> OpResult<CpuAct> {
        let mut out = self.linear_f32(x, w)?;
        self.round(ActRounding::LINEAR, &mut out.data);
        Ok(out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut CpuAct,
        delta: Option<&CpuAct>,
        weight: &CpuWeight,
        eps: f32,
    ) -> OpResult<CpuAct> {
        norm::add_rms_norm(self, residual, delta, weight, eps)
    }

    fn rms_norm_groups(&self, x: &mut CpuAct, weight: &CpuWeight, eps: f32) -> OpResult<()> {
        norm::rms_norm_groups(self, x, weight, eps)
    }

    fn gated_rms_norm(
        &self,
        x: &mut CpuAct,
        z: &CpuAct,
        weight: &CpuWeight,
        eps: f32,
    ) -> OpResult<()> {
        norm::gated_rms_norm(self, x, z, weight, eps)
    }

    fn rope(
        &self,
        x: &mut CpuAct,
        heads: usize,
        head_dim: usize,
        spec: &RopeSpec,
        batch: &Batch,
    ) -> OpResult<()> {
        if heads.checked_mul(head_dim) != Some(x.cols)
            || spec.rotary_dim > head_dim
            || !spec.rotary_dim.is_multiple_of(2)
        {
            return Err(OpError::shape(
                "rope",
                format!(
                    "{} columns, {heads} heads × {head_dim}, rotary_dim {}",
                    x.cols, spec.rotary_dim
                ),
            ));
        }
        batch_rows("rope", x, batch, usize::MAX)?;
        let rope = Rope::new(spec.rotary_dim, spec.theta);
        for i in 0..batch.sequences() {
            let r = batch.seq_rows(i);
            let cols = x.cols;
            rope.apply(
                &mut x.data[r.start * cols..r.end * cols],
                heads,
                head_dim,
                batch.history[i],
            );
        }
        self.round(ActRounding::ATTENTION, &mut x.data);
        Ok(())
    }

    fn conv1d_silu(
        &self,
        x: &CpuAct,
        weight: &CpuWeight,
        state: &mut CpuGdnState,
        batch: &Batch,
    ) -> OpResult<CpuAct> {
        gdn::conv1d_silu(self, x, weight, state, batch)
    }

    fn gdn_gating(
        &self,
        a: &CpuAct,
        b: &CpuAct,
        a_log: &CpuWeight,
        dt_bias: &CpuWeight,
    ) -> OpResult<(CpuAct, CpuAct)> {
        gdn::gdn_gating(a, b, a_log, dt_bias)
    }

    fn gated_delta_rule(
        &self,
        qkv: &CpuAct,
        g: &CpuAct,
        beta: &CpuAct,
        state: &mut CpuGdnState,
        batch: &Batch,
    ) -> OpResult<CpuAct> {
        gdn::gated_delta_rule(self, qkv, g, beta, state, batch)
    }

    fn kv_write(
        &self,
        cache: &mut CpuKvCache,
        k: &CpuAct,
        v: &CpuAct,
        batch: &Batch,
    ) -> OpResult<()> {
        kv::kv_write(self, cache, k, v, batch)
    }

    fn attention(
        &self,
        q: &CpuAct,
        cache: &CpuKvCache,
        batch: &Batch,
        route: RouteRequest,
    ) -> OpResult<(CpuAct, AttentionReport)> {
        attention::attention(self, q, cache, batch, route)
    }

    fn mul_sigmoid(&self, x: &mut CpuAct, gate: &CpuAct) -> OpResult<()> {
        same_shape("mul_sigmoid", x, gate)?;
        for (o, g) in x.data.iter_mut().zip(&gate.data) {
            *o *= sigmoid(*g);
        }
        self.round(ActRounding::ATTENTION, &mut x.data);
        Ok(())
    }

    fn swiglu(&self, gate: &CpuAct, up: &CpuAct) -> OpResult<CpuAct> {
        same_shape("swiglu", gate, up)?;
        let mut out = gate.clone();
        swiglu(&mut out.data, &up.data);
        self.round(ActRounding::MLP, &mut out.data);
        Ok(out)
    }

    fn moe(&self, x: &CpuAct, w: &MoeWeights<CpuWeight>, spec: &MoeSpec) -> OpResult<CpuAct> {
        self.moe_supported(spec)?;
        moe::moe(self, x, w, spec)
    }

    fn world_size(&self) -> usize {
        self.group.as_ref().map_or(1, |g| g.comm.world())
    }

    /// Inside a group the partial stays unrounded (as the CUDA backend's,
    /// f32); `all_reduce_sum` rounds the sum.
    fn linear_partial(&self, x: &CpuAct, w: &CpuWeight) -> OpResult<CpuAct> {
        match self.group {
            Some(_) => self.linear_f32(x, w),
            None => self.linear(x, w),
        }
    }

    fn moe_partial(
        &self,
        x: &CpuAct,
        w: &MoeWeights<CpuWeight>,
        spec: &MoeSpec,
    ) -> OpResult<CpuAct> {
        match self.group {
            Some(_) => {
                self.moe_supported(spec)?;
                moe::moe_unrounded(self, x, w, spec)
            }
            None => self.moe(x, w, spec),
        }
    }

    /// The sum in rank order (f32), then, under bf16 emulation, its one
    /// rounding (the `LINEAR` site stands for every reduced partial).
    fn all_reduce_sum(&self, x: &mut CpuAct) -> OpResult<()> {
        match &self.group {
            Some(g) => {
                g.all_reduce_sum(x.rows, x.cols, &mut x.data)?;
                self.round(ActRounding::LINEAR, &mut x.data);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn all_gather_cols(&self, x: CpuAct) -> OpResult<CpuAct> {
        match &self.group {
            Some(g) => {
                let cols = x.cols * g.comm.world();
                let data = g.all_gather_cols(x.rows, x.cols, x.data)?;
                Ok(CpuAct::new(x.rows, cols, data))
            }
            None => Ok(x),
        }
    }

    fn gather_rows(&self, x: &CpuAct, rows: &[usize]) -> OpResult<CpuAct> {
        let mut out = Vec::with_capacity(rows.len() * x.cols);
        for &r in rows {
            if r >= x.rows {
                return Err(OpError::shape(
                    "gather_rows",
                    format!("row {r} >= {}", x.rows),
                ));
            }
            out.extend_from_slice(x.rows_of(r..r + 1));
        }
        Ok(CpuAct::new(rows.len(), x.cols, out))
    }

    fn sample(
        &self,
        logits: &CpuAct,
        params: &[SamplingParams],
        steps: &[u64],
    ) -> OpResult<Vec<u32>> {
        crate::sample::sample_rows(logits, params, steps)
    }

    fn sample_later(
        &self,
        logits: &CpuAct,
        params: &[SamplingParams],
        steps: &[u64],
    ) -> OpResult<Vec<u32>> {
        self.sample(logits, params, steps)
    }

    fn read_drawn(&self, drawn: &Vec<u32>) -> OpResult<Vec<u32>> {
        Ok(drawn.clone())
    }

    fn embed_drawn(
        &self,
        table: &CpuWeight,
        ids: &[u32],
        holes: &[(usize, usize)],
        drawn: &Vec<u32>,
    ) -> OpResult<CpuAct> {
        self.embed(table, &headroom_core::ops::fill_holes(ids, holes, drawn)?)
    }
}
