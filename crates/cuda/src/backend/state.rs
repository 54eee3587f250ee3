//! The per-layer state pools: KV block pools allocated up front (`spec.blocks`
//! blocks shared by the sequences through their block tables) and GDN conv +
//! recurrent state, one slot per running sequence; slot resets and copies.

use crate::device::CudaDevice;
use crate::launch::{alloc, dev_err, mul};
use crate::ops::state::RangeCopy;
use crate::tensor::{CudaGdnState, CudaKvCache};
use cudarc::driver::result;
use headroom_core::ops::{GdnSpec, KvSpec, OpError, OpResult, KV_BLOCK_ROWS};

/// A KV block pool of `spec.blocks` blocks (see [`CudaKvCache`]).
pub(crate) fn new_kv_cache(dev: &CudaDevice, spec: &KvSpec) -> OpResult<CudaKvCache> {
    let op = "new_kv_cache";
    if spec.slots == 0
        || spec.kv_heads == 0
        || spec.head_dim == 0
        || spec.capacity == 0
        || spec.blocks == 0
    {
        return Err(OpError::shape(op, format!("{spec:?}")));
    }
    let bytes = kv_pool_bytes(spec)?;
    let (k, v) = (alloc(dev, bytes)?, alloc(dev, bytes)?);
    Ok(CudaKvCache {
        spec: *spec,
        k,
        v,
        lens: vec![0; spec.slots],
    })
}

/// Bytes of one of the pool's two buffers (K or V): `blocks × kv_heads ×
/// KV_BLOCK_ROWS × head_dim` bf16, checked.
pub(crate) fn kv_pool_bytes(spec: &KvSpec) -> OpResult<usize> {
    let op = "new_kv_cache";
    mul(
        op,
        mul(op, mul(op, spec.blocks, spec.kv_heads)?, KV_BLOCK_ROWS)?,
        mul(op, spec.head_dim, 2)?,
    )
}

pub(crate) fn new_gdn_state(dev: &CudaDevice, spec: &GdnSpec) -> OpResult<CudaGdnState> {
    if spec.slots == 0
        || spec.kernel == 0
        || spec.k_heads == 0
        || !spec.v_heads.is_multiple_of(spec.k_heads)
        || spec.v_heads == 0
        || spec.k_dim == 0
        || spec.v_dim == 0
    {
        return Err(OpError::shape("new_gdn_state", format!("{spec:?}")));
    }
    let op = "new_gdn_state";
    let conv_dim = mul(op, spec.k_heads, spec.k_dim)?
        .checked_mul(2)
        .and_then(|a| a.checked_add(spec.v_heads.checked_mul(spec.v_dim)?))
        .ok_or_else(|| OpError::shape(op, "conv_dim overflows"))?;
    let conv = mul(op, mul(op, spec.slots, (spec.kernel - 1) * conv_dim)?, 2)?;
    let rec = mul(
        op,
        mul(
            op,
            spec.slots,
            mul(op, spec.v_heads, mul(op, spec.k_dim, spec.v_dim)?)?,
        )?,
        4,
    )?;
    let state = CudaGdnState {
        spec: *spec,
        conv: alloc(dev, conv.max(1))?,
        recurrent: alloc(dev, rec)?,
        tickets: alloc(dev, mul(op, mul(op, spec.slots, spec.k_heads)?, 4)?)?,
    };
    dev.fill_bytes(&state.conv, 0).map_err(dev_err)?;
    dev.fill_bytes(&state.recurrent, 0).map_err(dev_err)?;
    dev.fill_bytes(&state.tickets, 0).map_err(dev_err)?;
    Ok(state)
}

fn no_slot(slot: usize) -> OpError {
    OpError::State {
        slot,
        detail: "no such slot".into(),
    }
}

pub(crate) fn reset_kv_slot(cache: &mut CudaKvCache, slot: usize) -> OpResult<()> {
    *cache.lens.get_mut(slot).ok_or_else(|| no_slot(slot))? = 0;
    Ok(())
}

/// Zeroes `bytes` bytes at byte offset `at` of a buffer (queued).
fn zero_range(dev: &CudaDevice, base: u64, at: usize, bytes: usize) -> OpResult<()> {
    if bytes == 0 {
        return Ok(());
    }
    dev.bind().map_err(dev_err)?;
    // SAFETY: callers pass a range inside one slot of the state buffer.
    unsafe { result::memset_d8_async(base + at as u64, 0, bytes, dev.stream_raw()) }
        .map_err(|e| dev_err(e.into()))
}

pub(crate) fn reset_gdn_slot(
    dev: &CudaDevice,
    state: &mut CudaGdnState,
    slot: usize,
) -> OpResult<()> {
    let s = state.spec;
    if slot >= s.slots {
        return Err(no_slot(slot));
    }
    let conv = s.conv_len() * 2;
    let rec = s.recurrent_len() * 4;
    zero_range(dev, state.conv.ptr(), slot * conv, conv)?;
    zero_range(dev, state.recurrent.ptr(), slot * rec, rec)
}

/// Slot `to` holds as many tokens as slot `from` (the rows are in shared blocks).
pub(crate) fn copy_kv_slot(cache: &mut CudaKvCache, from: usize, to: usize) -> OpResult<()> {
    let len = *cache.lens.get(from).ok_or_else(|| no_slot(from))?;
    *cache.lens.get_mut(to).ok_or_else(|| no_slot(to))? = len;
    Ok(())
}

/// Copies `bytes` bytes from byte offset `src` to `dst` of one buffer (queued).
fn copy_range(dev: &CudaDevice, base: u64, src: usize, dst: usize, bytes: usize) -> OpResult<()> {
    if bytes == 0 || src == dst {
        return Ok(());
    }
    dev.bind().map_err(dev_err)?;
    // SAFETY: callers pass two disjoint ranges, each one slot of the state buffer.
    unsafe {
        result::memcpy_dtod_async(
            base + dst as u64,
            base + src as u64,
            bytes,
            dev.stream_raw(),
        )
    }
    .map_err(|e| dev_err(e.into()))
}

/// Copies slot `from`'s conv and recurrent state over slot `to`'s: two
/// device-to-device copies on the backend's stream.
pub(crate) fn copy_gdn_slot(
    dev: &CudaDevice,
    state: &mut CudaGdnState,
    from: usize,
    to: usize,
) -> OpResult<()> {
    let s = state.spec;
    if from >= s.slots {
        return Err(no_slot(from));
    }
    if to >= s.slots {
        return Err(no_slot(to));
    }
    let conv = s.conv_len() * 2;
    let rec = s.recurrent_len() * 4;
    copy_range(dev, state.conv.ptr(), from * conv, to * conv, conv)?;
    copy_range(dev, state.recurrent.ptr(), from * rec, to * rec, rec)
}

/// [`copy_gdn_slot`] in every one of `states`, as one launch of
/// [`crate::ops::state::copy_ranges`] (each layer's conv and recurrent state).
pub(crate) fn copy_gdn_slots(
    dev: &CudaDevice,
    states: &mut [&mut CudaGdnState],
    from: usize,
    to: usize,
) -> OpResult<()> {
    let mut ranges = Vec::with_capacity(2 * states.len());
    for state in states.iter() {
        let s = state.spec;
        if from >= s.slots {
            return Err(no_slot(from));
        }
        if to >= s.slots {
            return Err(no_slot(to));
        }
        let (conv, rec) = (s.conv_len() * 2, s.recurrent_len() * 4);
        for (base, len) in [(state.conv.ptr(), conv), (state.recurrent.ptr(), rec)] {
            ranges.push(RangeCopy {
                src: base + (from * len) as u64,
                dst: base + (to * len) as u64,
                bytes: len,
            });
        }
    }
    crate::ops::state::copy_ranges(dev, &ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_is_sized_by_its_blocks_with_checked_arithmetic() {
        let spec = KvSpec {
            slots: 8,
            kv_heads: 2,
            head_dim: 256,
            capacity: 100_000,
            blocks: 10,
        };
        assert_eq!(kv_pool_bytes(&spec).unwrap(), 10 * 2 * 64 * 256 * 2);
        let contiguous = KvSpec::contiguous(3, 2, 128, 130);
        assert_eq!(
            kv_pool_bytes(&contiguous).unwrap(),
            3 * 3 * 2 * 64 * 128 * 2
        );
        let huge = KvSpec {
            blocks: usize::MAX / 4,
            ..spec
        };
        assert!(kv_pool_bytes(&huge).is_err());
    }
}
