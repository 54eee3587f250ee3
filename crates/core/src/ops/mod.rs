//! The backend op set: the one interface the Qwen3.5 / Qwen3.6 model is
//! written against, implemented once per device (CPU, CUDA).
//!
//! Modelled on ggml's explicit op list (each backend one implementation per
//! op plus [`Backend::supports`]) with static dispatch (the model is generic
//! over `B: Backend`). Conventions every implementation follows:
//!
//! * **Activations** ([`Backend::Act`]) are 2-D, row-major `[rows][cols]`,
//!   rows packed over the sequences of a [`Batch`]. Their storage dtype is the
//!   backend's [`Backend::act_dtype`] (f32 on the CPU, bf16 on CUDA); every
//!   reduction (norms, softmax, GEMM accumulation, the delta-rule state)
//!   runs in f32.
//! * **Weights** ([`Backend::Weight`]) are uploaded once: matrices keep (CPU)
//!   or convert to (CUDA) a 16-bit storage dtype, vectors are f32. A matrix
//!   `[rows][cols]` multiplies as `y = x · Wᵀ` (PyTorch's `nn.Linear`);
//!   tensors of more than two dims are matrices with their leading dims
//!   flattened into rows.
//! * **State** lives in per-layer pools with one slot per running sequence
//!   ([`Backend::KvCache`], [`Backend::GdnState`]); a [`Batch`] names each
//!   sequence's slot and history. Ops that read or advance state take the
//!   batch and never touch other slots.
//! * Errors are values ([`OpError`]), never panics, for any input shape.
//!
//! Semantics are those of transformers' Qwen3.5 modules; each op's comment
//! names the exact formula. The CPU backend is the reference the others are
//! tested against.

mod batch;
mod blocks;
mod fused;
mod record;
pub mod rng;
mod sample;
mod specs;
mod workspace;

pub use batch::Batch;
pub use blocks::{blocks_for, BlockTables, KV_BLOCK_ROWS};
pub use fused::{
    attention_prep_composed, gdn_core_composed, gdn_core_steps, AttentionPrepWeights,
    GdnCoreInputs, GdnCoreWeights, GdnStep, GdnStepTimer, Untimed,
};
pub use record::StepKey;
pub use sample::sample_row;
pub use specs::{
    GdnSpec, InitWindow, KvSpec, MoeSpec, MoeWeights, OpKey, RopeSpec, SamplingParams, WeightInit,
};
pub use workspace::{AttentionCall, WorkspaceModel};

use crate::{AttentionError, AttentionReport, BackendKind, Dtype, RouteRequest, Tensor};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// A point in a backend's queued work, taken without waiting for it
/// ([`Backend::timeline_mark`]): profiles that must not synchronise.
pub enum TimelineMark {
    /// The host clock: a backend whose ops are complete when they return.
    Host(std::time::Instant),
    /// The backend's own record of the point (a CUDA event on its stream).
    Device(Box<dyn std::any::Any + Send>),
}

impl fmt::Debug for TimelineMark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimelineMark::Host(t) => write!(f, "Host({t:?})"),
            TimelineMark::Device(_) => write!(f, "Device(..)"),
        }
    }
}

/// Seconds from `from` to `to`, two host marks; `None` for any other pair.
pub fn host_seconds(from: &TimelineMark, to: &TimelineMark) -> Option<f64> {
    match (from, to) {
        (TimelineMark::Host(a), TimelineMark::Host(b)) => {
            Some(b.saturating_duration_since(*a).as_secs_f64())
        }
        _ => None,
    }
}

/// The error of [`Backend::timeline_seconds`] given a mark it did not make.
pub fn foreign_mark() -> OpError {
    OpError::Unsupported {
        op: "timeline_seconds",
        reason: "a mark of another backend".into(),
    }
}

/// Why an op could not run.
#[derive(Debug, Error)]
pub enum OpError {
    #[error("{op} is not supported on this backend: {reason}")]
    Unsupported { op: &'static str, reason: String },
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    #[error("bad batch description: {0}")]
    Batch(String),
    #[error(transparent)]
    Attention(#[from] AttentionError),
    #[error("state slot {slot}: {detail}")]
    State { slot: usize, detail: String },
    #[error("device: {0}")]
    Device(String),
}

impl OpError {
    /// A shape error of `op`.
    pub fn shape(op: &'static str, detail: impl Into<String>) -> OpError {
        OpError::Shape {
            op,
            detail: detail.into(),
        }
    }
}

pub type OpResult<T> = Result<T, OpError>;

/// A compute backend: memory, state pools and the ops of the forward.
pub trait Backend: Send + Sync {
    /// An activation `[rows][cols]` in [`Backend::act_dtype`].
    type Act: Send + Sync;
    /// An uploaded weight (matrix or f32 vector).
    type Weight: Send + Sync;
    /// One full-attention layer's keys and values for every slot.
    type KvCache: Send + Sync;
    /// One Gated DeltaNet layer's conv and recurrent state for every slot.
    type GdnState: Send + Sync;
    /// The tokens one [`Backend::sample_later`] drew, where it drew them
    /// (on a GPU: a device buffer and the read-back queued behind it).
    type Drawn: Send;

    fn kind(&self) -> BackendKind;

    /// Storage dtype of activations.
    fn act_dtype(&self) -> Dtype;

    /// `Ok(())` when this backend runs `op`, else the reason it cannot.
    /// Attention asks with the route and the layer's shape and dtype.
    fn supports(&self, op: &OpKey) -> Result<(), String>;

    // ---- memory ----------------------------------------------------------

    /// Uploads a matrix (leading dims flattened into rows), taking the host copy.
    fn upload_matrix(&self, t: Tensor) -> OpResult<Self::Weight>;
    /// Uploads a vector as f32 (any shape; used flat).
    fn upload_vector(&self, t: Tensor) -> OpResult<Self::Weight>;
    /// A `[rows][cols]` matrix drawn on the device from `init` (synthetic models):
    /// element `i` (row-major) is `mean + std · rng::normal(seed, init.counter(i, cols))`
    /// — `i` itself, or its position in the full matrix when `init.window` names
    /// a window of it (a tensor-parallel rank's shard).
    fn init_matrix(&self, rows: usize, cols: usize, init: WeightInit) -> OpResult<Self::Weight>;
    /// An activation from host f32 data (`data.len() == rows * cols`).
    fn act_from_f32(&self, rows: usize, cols: usize, data: &[f32]) -> OpResult<Self::Act>;
    /// An activation copied to the host as f32.
    fn act_to_f32(&self, x: &Self::Act) -> OpResult<Vec<f32>>;
    /// `(rows, cols)` of an activation.
    fn act_shape(&self, x: &Self::Act) -> (usize, usize);
    /// Bytes of device (or host) memory this backend holds now and at its peak
    /// since [`Backend::reset_peak_memory`]: `(active, peak)`.
    fn memory(&self) -> (usize, usize);
    /// Bytes this backend has obtained from the device: what it holds and
    /// what its allocator keeps cached for reuse (at least `memory().0`). A
    /// backend without a cache holds exactly its active bytes.
    fn memory_reserved(&self) -> usize {
        self.memory().0
    }
    /// Returns what the allocator keeps cached to the device (a no-op
    /// without a cache): the engine calls it once the weights are loaded, so
    /// that loading's temporaries neither hide in the device's use nor in
    /// the memory its pools are sized from.
    fn release_cached_memory(&self) {}
    /// `(allocations, frees)` this backend asked of the device so far
    /// (`(0, 0)` without a device allocator): a bench shows whether a run
    /// went to the driver.
    fn memory_driver_calls(&self) -> (u64, u64) {
        (0, 0)
    }
    fn reset_peak_memory(&self);
    /// Waits for queued work (a no-op on synchronous backends).
    fn synchronize(&self) -> OpResult<()>;
    /// Marks this point of the queued work without waiting for it: the host
    /// clock on a synchronous backend (the default), an event on a device's
    /// stream. Two marks give the device time between them
    /// ([`Backend::timeline_seconds`]).
    fn timeline_mark(&self) -> OpResult<TimelineMark> {
        Ok(TimelineMark::Host(std::time::Instant::now()))
    }
    /// Seconds from `from` to `to`, two marks of this backend, `from` first
    /// (waits for `to`).
    fn timeline_seconds(&self, from: &TimelineMark, to: &TimelineMark) -> OpResult<f64> {
        host_seconds(from, to).ok_or_else(foreign_mark)
    }

    // ---- recorded steps --------------------------------------------------

    /// `Ok(())` where this backend can record steps for replay
    /// ([`Backend::queue_step`]), else why it cannot.
    fn step_recording(&self) -> Result<(), String> {
        Err(format!(
            "the {} backend launches no kernels to record",
            self.kind()
        ))
    }

    /// Turns the recording of [`Backend::queue_step`]'s steps on or off
    /// (nothing where [`Backend::step_recording`] says it cannot).
    fn set_step_recording(&self, _on: bool) {}

    /// Queues one step's device work, which `queue` queues: as is by
    /// default; where the recording is on, recorded under `key` and
    /// launched as one unit (a CUDA graph), bit for bit the same work.
    /// The inner result is `queue`'s own. The outer error says the
    /// recording failed after `queue` ran: its work was not launched, and
    /// the step must be failed as one whose kernels failed.
    fn queue_step<T, E: fmt::Display>(
        &self,
        _key: StepKey,
        queue: impl FnOnce() -> Result<T, E>,
    ) -> OpResult<Result<T, E>> {
        Ok(queue())
    }
    /// This backend's account of the workspace its ops allocate (memory
    /// predictions ask it; see [`WorkspaceModel`]).
    fn workspace_model(&self) -> Arc<dyn WorkspaceModel>;

    // ---- state pools -----------------------------------------------------

    fn new_kv_cache(&self, spec: &KvSpec) -> OpResult<Self::KvCache>;
    fn new_gdn_state(&self, spec: &GdnSpec) -> OpResult<Self::GdnState>;
    /// Empties one slot of a KV cache (length 0).
    fn reset_kv_slot(&self, cache: &mut Self::KvCache, slot: usize) -> OpResult<()>;
    /// Zeroes one slot of a GDN state (conv and recurrent).
    fn reset_gdn_slot(&self, state: &mut Self::GdnState, slot: usize) -> OpResult<()>;
    /// Makes slot `to` of a KV cache hold what slot `from` holds: its
    /// length (the rows stay in the blocks the batches' tables name, which
    /// sequences share read-only). A prefix-cache snapshot and a hit resume.
    fn copy_kv_slot(&self, cache: &mut Self::KvCache, from: usize, to: usize) -> OpResult<()>;
    /// Copies slot `from`'s GDN state (conv and recurrent) over slot `to`'s
    /// (queued like the ops).
    fn copy_gdn_slot(&self, state: &mut Self::GdnState, from: usize, to: usize) -> OpResult<()>;
    /// [`Self::copy_gdn_slot`] in each of `states` (a model's GDN layers): a
    /// backend may queue them all as one launch.
    fn copy_gdn_slots(
        &self,
        states: &mut [&mut Self::GdnState],
        from: usize,
        to: usize,
    ) -> OpResult<()> {
        for s in states.iter_mut() {
            self.copy_gdn_slot(s, from, to)?;
        }
        Ok(())
    }
    /// Tokens held by `slot`.
    fn kv_len(&self, cache: &Self::KvCache, slot: usize) -> usize;

    // ---- ops -------------------------------------------------------------

    /// Rows `table[ids[i]]` (`table`: `[vocab][hidden]`).
    fn embed(&self, table: &Self::Weight, ids: &[u32]) -> OpResult<Self::Act>;

    /// `y = x · Wᵀ` (`x`: `[t][in]`, `w`: `[out][in]`, `y`: `[t][out]`).
    fn linear(&self, x: &Self::Act, w: &Self::Weight) -> OpResult<Self::Act>;

    /// [`Backend::linear`] of one `x` by each of `ws`, outputs in that order
    /// (a layer's projections of the same rows); a backend may compute them
    /// in one pass over the weights.
    fn linear_many(&self, x: &Self::Act, ws: &[&Self::Weight]) -> OpResult<Vec<Self::Act>> {
        ws.iter().map(|w| self.linear(x, w)).collect()
    }

    /// `residual += delta` (when given), then returns Qwen3.5's zero-centred
    /// RMSNorm of the new residual: `r / sqrt(mean(r²) + eps) · (1 + w)`.
    fn add_rms_norm(
        &self,
        residual: &mut Self::Act,
        delta: Option<&Self::Act>,
        weight: &Self::Weight,
        eps: f32,
    ) -> OpResult<Self::Act>;

    /// In place, the zero-centred RMSNorm over every consecutive group of
    /// `weight.len()` values (per-head q/k norm).
    fn rms_norm_groups(&self, x: &mut Self::Act, weight: &Self::Weight, eps: f32) -> OpResult<()>;

    /// In place, the gated RMSNorm of the GDN output over groups of
    /// `weight.len()` values: `x = w · x / sqrt(mean(x²) + eps) · silu(z)`.
    fn gated_rms_norm(
        &self,
        x: &mut Self::Act,
        z: &Self::Act,
        weight: &Self::Weight,
        eps: f32,
    ) -> OpResult<()>;

    /// In place, partial RoPE (`rotate_half` convention) of `x`
    /// `[t][heads * head_dim]` at each row's position from `batch`.
    fn rope(
        &self,
        x: &mut Self::Act,
        heads: usize,
        head_dim: usize,
        rope: &RopeSpec,
        batch: &Batch,
    ) -> OpResult<()>;

    /// Causal depthwise conv1d + SiLU over `x` `[t][conv_dim]` with weight
    /// `[conv_dim][kernel]`, rows before each sequence's first coming from its
    /// slot's conv state, which is then advanced.
    fn conv1d_silu(
        &self,
        x: &Self::Act,
        weight: &Self::Weight,
        state: &mut Self::GdnState,
        batch: &Batch,
    ) -> OpResult<Self::Act>;

    /// GDN gating from `a`, `b` `[t][v_heads]`: returns
    /// `(g, beta)` with `g = -exp(A_log) · softplus(a + dt_bias)`, `beta = sigmoid(b)`,
    /// both `[t][v_heads]` in f32 semantics (stored in the activation dtype
    /// unless the backend keeps f32).
    fn gdn_gating(
        &self,
        a: &Self::Act,
        b: &Self::Act,
        a_log: &Self::Weight,
        dt_bias: &Self::Weight,
    ) -> OpResult<(Self::Act, Self::Act)>;

    /// The gated delta rule over `qkv` `[t][2·k_heads·k_dim + v_heads·v_dim]`
    /// (the conv output: q, k, v concatenated), q and k L2-normalised per head
    /// and q scaled by `1/sqrt(k_dim)`, state per slot advanced. Returns
    /// `[t][v_heads·v_dim]`. Prefill rows may use the chunked form; the
    /// result equals the recurrent form up to rounding.
    fn gated_delta_rule(
        &self,
        qkv: &Self::Act,
        g: &Self::Act,
        beta: &Self::Act,
        state: &mut Self::GdnState,
        batch: &Batch,
    ) -> OpResult<Self::Act>;

    /// The Gated DeltaNet layer between its projections: the causal conv +
    /// SiLU of `mixed`, the gating, the gated delta rule and the gated RMSNorm
    /// with `z`, advancing both states of each sequence's slot; returns
    /// `[t][v_heads·v_dim]` for `out_proj`. Exactly [`gdn_core_composed`]; a
    /// backend may run it as fewer kernels (CUDA: one, for all-decode batches).
    fn gdn_core(
        &self,
        x: GdnCoreInputs<'_, Self::Act>,
        w: &GdnCoreWeights<'_, Self::Weight>,
        state: &mut Self::GdnState,
        batch: &Batch,
    ) -> OpResult<Self::Act> {
        gdn_core_composed(self, x, w, state, batch)
    }

    /// A full-attention layer's prep, in place on `q` `[t][heads·head_dim]` and
    /// `k` `[t][kv_heads·head_dim]`: per-head q/k norms, RoPE at each row's
    /// position, then `k`, `v` appended to the cache. Exactly
    /// [`attention_prep_composed`]; a backend may fuse it.
    fn attention_prep(
        &self,
        q: &mut Self::Act,
        k: &mut Self::Act,
        v: &Self::Act,
        w: &AttentionPrepWeights<'_, Self::Weight>,
        cache: &mut Self::KvCache,
        batch: &Batch,
    ) -> OpResult<()> {
        attention_prep_composed(self, q, k, v, w, cache, batch)
    }

    /// Appends each sequence's rows of `k`, `v` `[t][kv_heads·head_dim]` to its
    /// slot (which must hold exactly `batch.history[i]` tokens).
    fn kv_write(
        &self,
        cache: &mut Self::KvCache,
        k: &Self::Act,
        v: &Self::Act,
        batch: &Batch,
    ) -> OpResult<()>;

    /// Causal attention of `q` `[t][q_heads·head_dim]` over each sequence's
    /// cached keys and values (already including this step's rows), the
    /// queries being the last rows of that KV sequence. Runs `route` and
    /// returns the output `[t][q_heads·head_dim]` with the kernel's report.
    fn attention(
        &self,
        q: &Self::Act,
        cache: &Self::KvCache,
        batch: &Batch,
        route: RouteRequest,
    ) -> OpResult<(Self::Act, AttentionReport)>;

    /// [`Backend::attention`] with its output multiplied by `sigmoid(gate)`
    /// (`gate` the shape of `q`): Qwen3.5's gated attention. A backend may
    /// apply the gate in its attention's output pass; by default the two ops
    /// run one after the other.
    fn attention_gated(
        &self,
        q: &Self::Act,
        cache: &Self::KvCache,
        batch: &Batch,
        route: RouteRequest,
        gate: &Self::Act,
    ) -> OpResult<(Self::Act, AttentionReport)> {
        let (mut y, report) = self.attention(q, cache, batch, route)?;
        self.mul_sigmoid(&mut y, gate)?;
        Ok((y, report))
    }

    /// In place `x *= sigmoid(gate)` (same shapes).
    fn mul_sigmoid(&self, x: &mut Self::Act, gate: &Self::Act) -> OpResult<()>;

    /// `silu(gate) ⊙ up` (same shapes).
    fn swiglu(&self, gate: &Self::Act, up: &Self::Act) -> OpResult<Self::Act>;

    /// The sparse MoE block with its shared expert: router softmax (f32),
    /// top-k (ties to the lower index), optional renormalisation, SwiGLU
    /// experts weighted by their routing weight, plus the shared expert
    /// scaled by `sigmoid(shared_gate · x)`. `x`: `[t][hidden]` → `[t][hidden]`.
    fn moe(
        &self,
        x: &Self::Act,
        weights: &MoeWeights<Self::Weight>,
        spec: &MoeSpec,
    ) -> OpResult<Self::Act>;

    /// `out[i] = x[rows[i]]`.
    fn gather_rows(&self, x: &Self::Act, rows: &[usize]) -> OpResult<Self::Act>;

    // ---- communication (tensor parallelism) --------------------------------
    //
    // A backend may belong to a group of ranks that each hold a shard of the
    // model. These are the only collectives the sharded forward needs; outside
    // a group (world size 1) they are no-ops, so a backend that never joins a
    // group need not implement them.

    /// Ranks in this backend's group (1: not in a group).
    fn world_size(&self) -> usize {
        1
    }

    /// [`Backend::linear`] whose output is this rank's partial sum of a
    /// row-parallel projection (`o_proj`, `out_proj`, a dense MLP's `down`),
    /// about to go to [`Backend::all_reduce_sum`]. Inside a group a backend
    /// whose activations are narrower than f32 may return it in a wider
    /// dtype, so that the ranks' partials are summed before the one rounding
    /// to [`Backend::act_dtype`] (the rounding one unsplit GEMM does once);
    /// outside a group it is exactly `linear`.
    fn linear_partial(&self, x: &Self::Act, w: &Self::Weight) -> OpResult<Self::Act> {
        self.linear(x, w)
    }

    /// [`Backend::moe`] whose output is this rank's partial sum (its local
    /// experts and its shard of the shared expert), about to go to
    /// [`Backend::all_reduce_sum`]; may be wider than the activation dtype
    /// inside a group, exactly `moe` outside one (as [`Backend::linear_partial`]).
    fn moe_partial(
        &self,
        x: &Self::Act,
        weights: &MoeWeights<Self::Weight>,
        spec: &MoeSpec,
    ) -> OpResult<Self::Act> {
        self.moe(x, weights, spec)
    }

    /// `residual += delta`, then [`Backend::moe_partial`] of the new
    /// residual's zero-centred RMSNorm ([`Backend::add_rms_norm`] with `norm`
    /// and `eps`): a decoder layer's post-attention norm and its MoE block in
    /// one call, so that a backend may fold the norm into the block's first
    /// kernel (CUDA's decode path does). The same values as the two calls.
    fn add_rms_norm_moe_partial(
        &self,
        residual: &mut Self::Act,
        delta: &Self::Act,
        norm: &Self::Weight,
        eps: f32,
        weights: &MoeWeights<Self::Weight>,
        spec: &MoeSpec,
    ) -> OpResult<Self::Act> {
        let normed = self.add_rms_norm(residual, Some(delta), norm, eps)?;
        self.moe_partial(&normed, weights, spec)
    }

    /// [`Backend::add_rms_norm_moe_partial`] outside a group (the block's
    /// whole output), then `residual +=` that output and the zero-centred
    /// RMSNorm of the new residual with `next_norm` (the next layer's input
    /// norm): a decoder layer's MoE half and the next layer's input norm in
    /// one call, so that a backend may fold the add and the norm into the
    /// block's last kernel (CUDA's grouped-GEMM path folds them into its
    /// combine: the block's output is never written out). The same values
    /// as the calls. The model calls it only at world size 1.
    #[allow(clippy::too_many_arguments)]
    fn add_rms_norm_moe_add_rms_norm(
        &self,
        residual: &mut Self::Act,
        delta: &Self::Act,
        norm: &Self::Weight,
        eps: f32,
        weights: &MoeWeights<Self::Weight>,
        spec: &MoeSpec,
        next_norm: &Self::Weight,
    ) -> OpResult<Self::Act> {
        let out = self.add_rms_norm_moe_partial(residual, delta, norm, eps, weights, spec)?;
        self.add_rms_norm(residual, Some(&out), next_norm, eps)
    }

    /// In place, the element-wise sum of `x` over every rank of the group
    /// (each rank passes its partial `[rows][cols]`; all get the total). A
    /// partial from [`Backend::linear_partial`] / [`Backend::moe_partial`]
    /// is summed in its own (wider) dtype and comes back in
    /// [`Backend::act_dtype`], rounded once after the sum.
    fn all_reduce_sum(&self, x: &mut Self::Act) -> OpResult<()> {
        let _ = x;
        Ok(())
    }

    /// Every rank's `x` (`[rows][cols]`, the same shape on each) side by side
    /// in rank order: `[rows][world · cols]` (the vocab-parallel LM head).
    fn all_gather_cols(&self, x: Self::Act) -> OpResult<Self::Act> {
        Ok(x)
    }

    /// One token per row of `logits` `[n][vocab]`, row `i` drawn with
    /// `params[i]` (greedy when temperature is 0) using the counter-based
    /// random stream `(params[i].seed, steps[i])`.
    fn sample(
        &self,
        logits: &Self::Act,
        params: &[SamplingParams],
        steps: &[u64],
    ) -> OpResult<Vec<u32>>;

    // ---- a step queued before the last one's tokens are read ---------------

    /// [`Backend::sample`] without waiting for the tokens: the same tokens,
    /// read by [`Backend::read_drawn`] and fed to a next step by
    /// [`Backend::embed_drawn`] before they are read.
    fn sample_later(
        &self,
        logits: &Self::Act,
        params: &[SamplingParams],
        steps: &[u64],
    ) -> OpResult<Self::Drawn>;

    /// The tokens of `drawn`, one per row (waits for them, not for work
    /// queued after them); an error when a row had no finite logit.
    fn read_drawn(&self, drawn: &Self::Drawn) -> OpResult<Vec<u32>>;

    /// [`Backend::embed`] of `ids` whose entries `holes[j].0` are row
    /// `holes[j].1` of `drawn` (their values in `ids` are ignored).
    fn embed_drawn(
        &self,
        table: &Self::Weight,
        ids: &[u32],
        holes: &[(usize, usize)],
        drawn: &Self::Drawn,
    ) -> OpResult<Self::Act>;
}

/// `ids` with `holes[j].0` set to `tokens[holes[j].1]`: the host form of
/// [`Backend::embed_drawn`] (a hole or a row out of range is an error).
pub fn fill_holes(ids: &[u32], holes: &[(usize, usize)], tokens: &[u32]) -> OpResult<Vec<u32>> {
    let mut out = ids.to_vec();
    for &(at, row) in holes {
        let (Some(slot), Some(&t)) = (out.get_mut(at), tokens.get(row)) else {
            return Err(OpError::shape(
                "embed_drawn",
                format!(
                    "hole ({at}, {row}) outside {} ids and {} drawn tokens",
                    ids.len(),
                    tokens.len()
                ),
            ));
        };
        *slot = t;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::fill_holes;

    #[test]
    fn holes_take_their_drawn_rows_and_the_rest_stays() {
        let ids = [7, 0, 9, 0];
        let out = fill_holes(&ids, &[(3, 0), (1, 2)], &[40, 41, 42]).unwrap();
        assert_eq!(out, vec![7, 42, 9, 40]);
        assert_eq!(fill_holes(&ids, &[], &[]).unwrap(), ids.to_vec());
    }

    #[test]
    fn a_hole_outside_the_ids_or_the_drawn_rows_is_refused() {
        assert!(fill_holes(&[1, 2], &[(2, 0)], &[5]).is_err());
        assert!(fill_holes(&[1, 2], &[(0, 1)], &[5]).is_err());
    }
}
