//! What the CPU backend holds and counts: matrices and vectors uploaded
//! (as stored, as bf16 under the emulation's `bf16_matrices`, FP8
//! dequantized), `init_matrix`'s seeded bf16 fill, the KV and GDN state
//! pools (created, slots reset and copied), and the active / peak byte
//! counters behind `Backend::memory` (`note_transient`, `add_active`).

use super::{CpuBackend, CpuWeight};
use crate::state::{CpuGdnState, CpuKvCache};
use half::bf16;
use headroom_core::ops::{rng, GdnSpec, KvSpec, OpError, OpResult, WeightInit};
use headroom_core::{Dtype, Tensor, TensorData};
use rayon::prelude::*;
use std::sync::atomic::Ordering;

impl CpuBackend {
    pub(crate) fn note_transient(&self, bytes: usize) {
        let now = self.active.load(Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    pub(crate) fn add_active(&self, bytes: usize) {
        let now = self.active.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Takes `bytes` freed off the active count (never below zero).
    fn sub_active(&self, bytes: usize) {
        let _ = self
            .active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
                Some(a.saturating_sub(bytes))
            });
    }
}

pub(crate) fn upload_matrix(be: &CpuBackend, t: Tensor) -> OpResult<CpuWeight> {
    if t.shape.is_empty() || t.numel() != t.shape.iter().product::<usize>() {
        return Err(OpError::shape(
            "upload_matrix",
            format!("bad shape {:?}", t.shape),
        ));
    }
    // The matrix is held as stored (or as bf16) and counted in `memory()`;
    // FP8 is dequantized to f32 here, so every CPU op reads plain data.
    let t = t.dequantized();
    if be.precision.bf16_matrices && t.dtype() != Dtype::Bf16 {
        let data = t.to_f32_vec().into_iter().map(bf16::from_f32).collect();
        be.add_active(t.numel() * 2);
        return Ok(CpuWeight::Matrix(Tensor::new(
            t.shape,
            TensorData::Bf16(data),
        )));
    }
    be.add_active(t.numel() * t.dtype().size_bytes());
    Ok(CpuWeight::Matrix(t))
}

pub(crate) fn upload_vector(be: &CpuBackend, t: Tensor) -> OpResult<CpuWeight> {
    be.add_active(t.numel() * 4);
    Ok(CpuWeight::Vector(t.to_f32_vec()))
}

pub(crate) fn init_matrix(
    be: &CpuBackend,
    rows: usize,
    cols: usize,
    init: WeightInit,
) -> OpResult<CpuWeight> {
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| OpError::shape("init_matrix", "rows × cols overflows"))?;
    let data: Vec<bf16> = (0..n as u64)
        .into_par_iter()
        .map(|i| {
            let c = init.counter(i, cols as u64);
            bf16::from_f32(init.mean + init.std * rng::normal(init.seed, c))
        })
        .collect();
    be.add_active(n * 2);
    Ok(CpuWeight::Matrix(Tensor::new(
        vec![rows, cols],
        TensorData::Bf16(data),
    )))
}

pub(crate) fn new_kv_cache(spec: &KvSpec) -> OpResult<CpuKvCache> {
    if spec.kv_heads == 0 || spec.head_dim == 0 {
        return Err(OpError::shape("new_kv_cache", format!("{spec:?}")));
    }
    // Blocks are allocated (and counted) as kv_write fills them.
    CpuKvCache::new(*spec)
}

pub(crate) fn new_gdn_state(be: &CpuBackend, spec: &GdnSpec) -> OpResult<CpuGdnState> {
    if spec.kernel == 0
        || spec.k_heads == 0
        || !spec.v_heads.is_multiple_of(spec.k_heads)
        || spec.k_dim == 0
        || spec.v_dim == 0
    {
        return Err(OpError::shape("new_gdn_state", format!("{spec:?}")));
    }
    let st = CpuGdnState::new(*spec);
    be.add_active(st.bytes());
    Ok(st)
}

pub(crate) fn reset_kv_slot(be: &CpuBackend, cache: &mut CpuKvCache, slot: usize) -> OpResult<()> {
    let freed = cache.reset(slot).ok_or(OpError::State {
        slot,
        detail: "no such slot".into(),
    })?;
    // kv_write counted each block it allocated.
    be.sub_active(freed);
    Ok(())
}

pub(crate) fn reset_gdn_slot(state: &mut CpuGdnState, slot: usize) -> OpResult<()> {
    if slot >= state.spec.slots {
        return Err(OpError::State {
            slot,
            detail: "no such slot".into(),
        });
    }
    state.conv[slot].fill(0.0);
    state.recurrent[slot].fill(0.0);
    Ok(())
}

pub(crate) fn copy_kv_slot(
    be: &CpuBackend,
    cache: &mut CpuKvCache,
    from: usize,
    to: usize,
) -> OpResult<()> {
    let freed = cache.copy_slot(from, to).ok_or(OpError::State {
        slot: from.max(to),
        detail: "no such slot".into(),
    })?;
    be.sub_active(freed);
    Ok(())
}

pub(crate) fn copy_gdn_slot(state: &mut CpuGdnState, from: usize, to: usize) -> OpResult<()> {
    state.copy_slot(from, to).ok_or(OpError::State {
        slot: from.max(to),
        detail: "no such slot".into(),
    })
}
