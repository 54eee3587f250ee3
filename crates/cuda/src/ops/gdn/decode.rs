//! The GDN layer core (`Backend::gdn_core`) for all-decode batches in one
//! launch (`gdn_decode.cu`): conv + SiLU with the conv-state advance,
//! gating, the recurrent delta rule and the gated norm. Other batches and
//! other shapes run the composition of the plain ops.
//! The slots go to the kernel by value (no host-to-device copy per call);
//! one CTA per (value head, sequence).

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch_packed_pdl, GRID_X, GRID_YZ};
use crate::tensor::new_act;
use crate::tensor::{CudaAct, CudaGdnState, CudaWeight};
use headroom_core::ops::{Batch, GdnCoreInputs, GdnCoreWeights, OpError, OpResult};
use headroom_core::Dtype;
use std::ffi::c_void;

/// Key and value head dim the kernel is built for (`DK`, `DV`).
const DIM: usize = 128;
/// Threads per CTA (`THREADS`).
const THREADS: u32 = 512;
/// Sequences per launch (`MAX_SEQS`).
const MAX_SEQS: usize = 512;
/// The kernel's one entry point.
const ENTRY: &str = "gdn_decode_step_bf16";

#[repr(C)]
struct SlotTable {
    n: i32,
    slot: [i32; MAX_SEQS],
}

// The table and the 16 arguments before it fit the 4 KiB of kernel parameters.
const _: () = assert!(std::mem::size_of::<SlotTable>() + 16 * 8 <= 4096);

/// Whether the dispatch sends this call to the fused kernel.
pub(crate) fn takes(
    x: &GdnCoreInputs<'_, CudaAct>,
    w: &GdnCoreWeights<'_, CudaWeight>,
    state: &CudaGdnState,
    batch: &Batch,
) -> bool {
    eligible(x, w, state, batch).is_ok()
}

/// `Ok` when the fused kernel runs this call exactly: every sequence one row,
/// head dims 128, conv width 4 with f32 weights, shapes and dtypes as the
/// composition takes them; else why not.
pub(crate) fn eligible(
    x: &GdnCoreInputs<'_, CudaAct>,
    w: &GdnCoreWeights<'_, CudaWeight>,
    state: &CudaGdnState,
    batch: &Batch,
) -> Result<(), String> {
    let s = state.spec;
    let n = batch.sequences();
    batch.validate(s.slots).map_err(|e| e.to_string())?;
    if batch.rows() != n {
        return Err("not every sequence is one row".into());
    }
    if s.k_dim != DIM || s.v_dim != DIM || s.kernel != 4 {
        return Err(format!(
            "{s:?}: the kernel takes head dims {DIM}, conv width 4"
        ));
    }
    let act = |a: &CudaAct, cols: usize| a.dtype == Dtype::Bf16 && a.rows == n && a.cols == cols;
    let vhd = s.v_heads * s.v_dim;
    if !act(&x.mixed, s.conv_dim())
        || !act(x.z, vhd)
        || !act(x.b, s.v_heads)
        || !act(x.a, s.v_heads)
    {
        return Err("inputs are not bf16 [rows][conv_dim | v_heads·v_dim | v_heads]".into());
    }
    let vector = |v: &CudaWeight, len: usize| v.dtype == Dtype::F32 && v.elems() == len;
    if !vector(w.conv, s.conv_dim() * 4)
        || !vector(w.a_log, s.v_heads)
        || !vector(w.dt_bias, s.v_heads)
        || !vector(w.norm, s.v_dim)
    {
        return Err("weights are not f32 vectors of the spec's lengths".into());
    }
    Ok(())
}

fn param<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

/// The fused step; `Err` (nothing launched) unless [`eligible`] (the
/// timing test launches it directly, with the same inputs each call).
pub fn gdn_decode(
    dev: &CudaDevice,
    x: &GdnCoreInputs<'_, CudaAct>,
    w: &GdnCoreWeights<'_, CudaWeight>,
    state: &mut CudaGdnState,
    batch: &Batch,
) -> OpResult<CudaAct> {
    let op = "gdn_core";
    eligible(x, w, state, batch).map_err(|reason| OpError::Unsupported { op, reason })?;
    let s = state.spec;
    let n = batch.sequences();
    let out = new_act(dev, op, n, s.v_heads * s.v_dim, Dtype::Bf16)?;
    let (mut hk, mut hv) = (
        int(op, "k_heads", s.k_heads)?,
        int(op, "v_heads", s.v_heads)?,
    );
    let mut eps = w.eps;
    let mut ptrs = [
        x.mixed.ptr(),
        x.z.ptr(),
        x.b.ptr(),
        x.a.ptr(),
        w.conv.ptr(),
        w.a_log.ptr(),
        w.dt_bias.ptr(),
        w.norm.ptr(),
        state.conv.ptr(),
        state.recurrent.ptr(),
        state.tickets.ptr(),
        out.ptr(),
    ];
    for (first, chunk) in (0..n).step_by(MAX_SEQS).zip(batch.slots.chunks(MAX_SEQS)) {
        let mut tab = SlotTable {
            n: chunk.len() as i32,
            slot: [0; MAX_SEQS],
        };
        for (t, &slot) in tab.slot.iter_mut().zip(chunk) {
            *t = int(op, "slot", slot)?;
        }
        let mut row0 = int(op, "row", first)?;
        let mut params: Vec<*mut c_void> = ptrs.iter_mut().map(param).collect();
        params.extend([
            param(&mut hk),
            param(&mut hv),
            param(&mut eps),
            param(&mut row0),
            param(&mut tab),
        ]);
        let grid = (
            grid_dim(op, s.v_heads, GRID_X)?,
            grid_dim(op, chunk.len(), GRID_YZ)?,
            1,
        );
        // SAFETY: eligible() checked every buffer's shape and dtype against the
        // spec (k_dim = v_dim = 128, width 4) and every slot against the pools
        // (distinct, < slots); rows row0 .. row0 + len of the inputs exist;
        // the tickets hold slots · k_heads u32; params match the kernel signature;
        // the kernel waits for the previous one first (programmatic launch).
        unsafe { launch_packed_pdl(dev, ENTRY, grid, THREADS, &mut params)? };
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    /// CTAs of the kernel that may be resident on one SM at once (its
    /// launch bounds: the registers).
    const CTAS_PER_SM: usize = 2;
    use crate::kernels::source_constant;
    use crate::ops::gdn::sources::GDN_DECODE;

    #[test]
    fn launch_constants_match_the_kernel() {
        let src = GDN_DECODE.source;
        assert_eq!(source_constant(src, "DK"), DIM);
        assert_eq!(source_constant(src, "DV"), DIM);
        assert_eq!(source_constant(src, "MAX_SEQS"), MAX_SEQS);
        assert_eq!(source_constant(src, "THREADS"), THREADS as usize);
        assert_eq!(GDN_DECODE.entry_points, [ENTRY]);
        let bounds = format!("__launch_bounds__(gdn_dec::THREADS, {CTAS_PER_SM})");
        assert!(src.contains(&bounds));
    }
}
