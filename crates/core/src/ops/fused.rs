//! Layer-level ops that a backend may fuse: the Gated DeltaNet core between
//! its projections ([`super::Backend::gdn_core`]) and the full-attention prep
//! between the projections and the attention ([`super::Backend::attention_prep`]).
//!
//! Each has one reference meaning, the composition of the plain ops written
//! here ([`gdn_core_composed`], [`attention_prep_composed`]): the trait's
//! default runs it, and a backend that fuses some batches (the CUDA backend:
//! all-decode ones) runs it for the others.

use super::{Backend, Batch, OpResult, RopeSpec};

/// The GDN layer's projected rows for [`super::Backend::gdn_core`]: `mixed`
/// (`in_proj_qkv`, `[t][conv_dim]`, taken so the composition can free it
/// after the conv, as the layer always did), `z` (`[t][v_heads·v_dim]`),
/// `b` and `a` (`[t][v_heads]`).
pub struct GdnCoreInputs<'a, A> {
    pub mixed: A,
    pub z: &'a A,
    pub b: &'a A,
    pub a: &'a A,
}

/// The GDN layer's weights between its projections.
pub struct GdnCoreWeights<'a, W> {
    /// The depthwise conv `[conv_dim][kernel]` (a vector).
    pub conv: &'a W,
    pub a_log: &'a W,
    pub dt_bias: &'a W,
    /// The gated RMSNorm weight `[v_dim]`.
    pub norm: &'a W,
    pub eps: f32,
}

/// A full-attention layer's prep weights and shape for
/// [`super::Backend::attention_prep`].
pub struct AttentionPrepWeights<'a, W> {
    /// Per-head zero-centred RMSNorm weights `[head_dim]` of q and k.
    pub q_norm: &'a W,
    pub k_norm: &'a W,
    pub eps: f32,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope: &'a RopeSpec,
}

/// The four steps of [`gdn_core_composed`], for a caller that times them
/// apart ([`gdn_core_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GdnStep {
    Conv,
    Gating,
    Rule,
    GatedNorm,
}

/// Runs each step of [`gdn_core_steps`] (a profiler may time it).
pub trait GdnStepTimer {
    fn time<R>(&self, step: GdnStep, f: impl FnOnce() -> R) -> R;
}

/// A [`GdnStepTimer`] that only runs the steps.
pub struct Untimed;

impl GdnStepTimer for Untimed {
    fn time<R>(&self, _step: GdnStep, f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// The GDN core as plain ops: `conv1d_silu` (advancing the conv state),
/// `gdn_gating`, `gated_delta_rule` (advancing the recurrent state),
/// `gated_rms_norm` with `z`. Returns `[t][v_heads·v_dim]`.
pub fn gdn_core_composed<B: Backend + ?Sized>(
    be: &B,
    x: GdnCoreInputs<'_, B::Act>,
    w: &GdnCoreWeights<'_, B::Weight>,
    state: &mut B::GdnState,
    batch: &Batch,
) -> OpResult<B::Act> {
    gdn_core_steps(be, x, w, state, batch, &Untimed)
}

/// [`gdn_core_composed`] with each step run through `timer`.
pub fn gdn_core_steps<B: Backend + ?Sized, T: GdnStepTimer>(
    be: &B,
    x: GdnCoreInputs<'_, B::Act>,
    w: &GdnCoreWeights<'_, B::Weight>,
    state: &mut B::GdnState,
    batch: &Batch,
    timer: &T,
) -> OpResult<B::Act> {
    let GdnCoreInputs { mixed, z, b, a } = x;
    let qkv = timer.time(GdnStep::Conv, || {
        be.conv1d_silu(&mixed, w.conv, state, batch)
    })?;
    drop(mixed);
    let (g, beta) = timer.time(GdnStep::Gating, || be.gdn_gating(a, b, w.a_log, w.dt_bias))?;
    let mut core = timer.time(GdnStep::Rule, || {
        be.gated_delta_rule(&qkv, &g, &beta, state, batch)
    })?;
    drop(qkv);
    timer.time(GdnStep::GatedNorm, || {
        be.gated_rms_norm(&mut core, z, w.norm, w.eps)
    })?;
    Ok(core)
}

/// The attention prep as plain ops: `rms_norm_groups` of q and of k, RoPE of
/// q and of k at each row's position, `kv_write` of k and v.
pub fn attention_prep_composed<B: Backend + ?Sized>(
    be: &B,
    q: &mut B::Act,
    k: &mut B::Act,
    v: &B::Act,
    w: &AttentionPrepWeights<'_, B::Weight>,
    cache: &mut B::KvCache,
    batch: &Batch,
) -> OpResult<()> {
    be.rms_norm_groups(q, w.q_norm, w.eps)?;
    be.rms_norm_groups(k, w.k_norm, w.eps)?;
    be.rope(q, w.heads, w.head_dim, w.rope, batch)?;
    be.rope(k, w.kv_heads, w.head_dim, w.rope, batch)?;
    be.kv_write(cache, k, v, batch)
}
