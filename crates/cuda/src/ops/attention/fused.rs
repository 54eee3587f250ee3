//! Launches the fused prefill kernel: `attention_fused_wgmma.cu` on Hopper
//! (with the split-KV combine), `attention_fused.cu` elsewhere. The tile
//! constants here must match the kernels'.

use super::RawBuffers;
use crate::device::{CudaDevice, Function};
use crate::CudaError;
use headroom_core::fused_capability::FUSED_HEAD_DIMS;
use headroom_core::{AttentionError, AttentionShape, Dtype};
use std::ffi::c_void;

/// Query rows per CTA (`BLOCK_M` in the kernel).
pub const BLOCK_M: usize = 128;
/// Largest keys-per-tile of any head dim (`BLOCK_N_MAX`; head dim 256 may use fewer).
pub const BLOCK_N_MAX: usize = 64;
/// Threads per CTA (`THREADS`).
pub const THREADS: usize = 256;

/// Which fused kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedImpl {
    /// `attention_fused.cu`: mma.sync m16n8k16, any sm_80+ GPU.
    MmaSync,
    /// `attention_fused_wgmma.cu`: warpgroup MMA, Hopper (sm_90a) only.
    Wgmma,
}

impl FusedImpl {
    pub fn as_str(self) -> &'static str {
        match self {
            FusedImpl::MmaSync => "mma.sync",
            FusedImpl::Wgmma => "wgmma",
        }
    }
}

/// The fused kernel for an architecture: wgmma on `sm_90a`, mma.sync elsewhere.
pub fn fused_impl(arch: &str) -> FusedImpl {
    if arch == "sm_90a" {
        FusedImpl::Wgmma
    } else {
        FusedImpl::MmaSync
    }
}

/// Query rows per CTA of the wgmma kernel: one warpgroup of 64 rows, two
/// CTAs resident per SM.
pub const WGMMA_BLOCK_M: usize = 64;
/// Threads per CTA of the wgmma kernel (one warpgroup).
pub(super) const WGMMA_THREADS: u32 = 128;
/// CTAs of the wgmma kernel resident per SM.
pub(super) const WGMMA_CTAS_PER_SM: usize = 2;

/// Dynamic shared memory of the wgmma kernel: Q tile + one K and one V tile,
/// plus 1 KiB to align them to the 128-byte swizzle period.
pub fn wgmma_smem_bytes(head_dim: usize) -> usize {
    (WGMMA_BLOCK_M + 2 * BLOCK_N_MAX) * head_dim * 2 + 1024
}

/// The mma.sync fused kernel for `head_dim` and `dtype`, if one is compiled.
pub fn fused_entry(head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    Some(match (head_dim, dtype) {
        (256, Dtype::Bf16) => "attn_fused_prefill_d256_bf16",
        (256, Dtype::F16) => "attn_fused_prefill_d256_f16",
        (128, Dtype::Bf16) => "attn_fused_prefill_d128_bf16",
        (128, Dtype::F16) => "attn_fused_prefill_d128_f16",
        (64, Dtype::Bf16) => "attn_fused_prefill_d64_bf16",
        (64, Dtype::F16) => "attn_fused_prefill_d64_f16",
        _ => return None,
    })
}

/// The wgmma fused kernel for `head_dim` and `dtype`, if one is compiled.
pub fn fused_wgmma_entry(head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    Some(match (head_dim, dtype) {
        (256, Dtype::Bf16) => "attn_fused_prefill_wgmma_d256_bf16",
        (256, Dtype::F16) => "attn_fused_prefill_wgmma_d256_f16",
        (128, Dtype::Bf16) => "attn_fused_prefill_wgmma_d128_bf16",
        (128, Dtype::F16) => "attn_fused_prefill_wgmma_d128_f16",
        (64, Dtype::Bf16) => "attn_fused_prefill_wgmma_d64_bf16",
        (64, Dtype::F16) => "attn_fused_prefill_wgmma_d64_f16",
        _ => return None,
    })
}

/// Dynamic shared memory reserved for `head_dim`: Q tile + one K and one V
/// tile of the largest tile width (an upper bound of what the kernel uses).
pub fn smem_bytes(head_dim: usize) -> usize {
    (BLOCK_M + 2 * BLOCK_N_MAX) * head_dim * 2
}

/// Most key splits of one (query tile, head) (the combine kernel holds up to
/// `COMBINE_MAX_SPLITS` = 1024 weights).
pub const MAX_SPLITS: usize = 128;
/// Threads of the split combine (`COMBINE_THREADS` in the kernel).
pub(super) const COMBINE_THREADS: u32 = 256;
/// float4 column quads per combine CTA (`COMBINE_QUADS`): d / 64 CTAs a row.
pub(super) const COMBINE_QUADS: usize = 16;
/// Fewest key tiles a split gets. One: each split's tiles run one after the
/// other, so a batch-1 decode row is fastest with as many one-tile splits as
/// fill the GPU (H200, `step256_timing` batch-1 sweep, session 6: 2k keys 32
/// splits 11.9 us against 17.7 us at 4 tiles a split; 8k 128 splits 13.0 against 16.6).
pub const MIN_SPLIT_TILES: usize = 1;
/// Fewest key tiles of a shape before it is split at all.
pub const MIN_SPLIT_KV_TILES: usize = 16;

/// How the wgmma kernel covers a shape: which rows each CTA takes and how
/// many CTAs share one query tile's keys (split-KV, then a combine kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPlan {
    /// Query rows per launched head: `group · q_len` when packed.
    pub rows: usize,
    /// Launched heads: the KV heads when packed, else the query heads.
    pub heads: usize,
    /// Query positions repeat every `period` rows (`q_len`; packed rows stack
    /// a GQA group's heads, each `q_len` rows long).
    pub period: usize,
    /// CTAs per (query tile, head) along the keys; 1 = the plain prefill kernel.
    pub splits: usize,
}

impl SplitPlan {
    /// Whether the rows of a GQA group share CTAs.
    pub fn packed(&self) -> bool {
        self.rows != self.period
    }
}

/// The schedule of `shape` on a GPU with `sm_count` SMs for the wgmma kernel
/// of `block_m`-row CTAs (`ctas_per_sm` resident): a chunk shorter than one
/// tile packs its GQA group into the tile's rows; when the query tiles ×
/// heads leave CTA slots of the GPU empty and the keys are long, the keys
/// are split so the CTAs fill one wave (at most [`MAX_SPLITS`], each at
/// least [`MIN_SPLIT_TILES`] key tiles).
pub fn split_plan(
    shape: &AttentionShape,
    block_m: usize,
    ctas_per_sm: usize,
    sm_count: usize,
) -> SplitPlan {
    let group = shape.q_heads / shape.kv_heads.max(1);
    let packed = group > 1 && shape.q_len < block_m;
    let (rows, heads) = if packed {
        (shape.q_len * group, shape.kv_heads)
    } else {
        (shape.q_len, shape.q_heads)
    };
    let tiles = rows.div_ceil(block_m) * heads;
    let kv_tiles = shape.kv_len.div_ceil(BLOCK_N_MAX);
    let splits = splits_for(tiles, kv_tiles, sm_count * ctas_per_sm);
    SplitPlan {
        rows,
        heads,
        period: shape.q_len,
        splits,
    }
}

/// Key splits for `ctas` CTAs (query tiles × heads) whose longest reads
/// `kv_tiles` key tiles on a GPU of `slots` resident CTAs: 1 when the CTAs
/// fill the GPU or the keys are short (fewer than [`MIN_SPLIT_KV_TILES`]),
/// else enough to fill one wave, at most [`MAX_SPLITS`] and each split at
/// least [`MIN_SPLIT_TILES`] key tiles.
pub fn splits_for(ctas: usize, kv_tiles: usize, slots: usize) -> usize {
    let most = (kv_tiles / MIN_SPLIT_TILES).clamp(1, MAX_SPLITS);
    let slots = slots.max(1);
    if ctas >= slots || kv_tiles < MIN_SPLIT_KV_TILES {
        1
    } else {
        (slots / ctas.max(1)).clamp(1, most)
    }
}

/// The wgmma schedule of `shape` on `dev` (what [`run`] launches there).
pub fn split_plan_for(dev: &CudaDevice, shape: &AttentionShape) -> SplitPlan {
    split_plan(shape, WGMMA_BLOCK_M, WGMMA_CTAS_PER_SM, dev.sm_count)
}

/// Launches the fused kernel; the KV heads' rows are `kv_stride` elements
/// apart (`kv_len · head_dim` for plain tensors, more in a cache slot; only
/// the wgmma kernel takes a larger stride).
pub(super) fn run(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    scale_log2: f32,
    bufs: &RawBuffers,
    kv_stride: usize,
) -> Result<(), CudaError> {
    let imp = fused_impl(&dev.arch);
    let entry = match imp {
        FusedImpl::MmaSync => fused_entry(shape.head_dim, dtype),
        FusedImpl::Wgmma => fused_wgmma_entry(shape.head_dim, dtype),
    };
    let entry = entry.ok_or_else(|| AttentionError::UnsupportedHeadDim {
        head_dim: shape.head_dim,
        route: "fused",
        backend: "cuda",
        supported: FUSED_HEAD_DIMS.to_vec(),
    })?;
    let plain_stride = shape.kv_len * shape.head_dim;
    if kv_stride < plain_stride || (imp == FusedImpl::MmaSync && kv_stride != plain_stride) {
        return Err(CudaError::Shape {
            op: "attention",
            detail: format!(
                "kv head stride {kv_stride} for kv_len·head_dim {plain_stride} ({})",
                imp.as_str()
            ),
        });
    }
    let f = dev.function(entry)?;
    let smem = match imp {
        FusedImpl::MmaSync => smem_bytes(shape.head_dim),
        FusedImpl::Wgmma => wgmma_smem_bytes(shape.head_dim),
    };
    dev.set_dynamic_smem(f, smem)?;
    match imp {
        FusedImpl::MmaSync => run_mma(dev, f, shape, scale_log2, bufs, smem),
        FusedImpl::Wgmma => run_wgmma(dev, f, shape, dtype, scale_log2, bufs, kv_stride, smem),
    }
}

/// The mma.sync kernel `f` over plain K/V tensors.
fn run_mma(
    dev: &CudaDevice,
    f: Function,
    shape: &AttentionShape,
    scale_log2: f32,
    bufs: &RawBuffers,
    smem: usize,
) -> Result<(), CudaError> {
    let (mut q, mut k, mut v, mut o) = (bufs.q, bufs.k, bufs.v, bufs.out);
    let (mut q_len, mut kv_len) = (shape.q_len as i32, shape.kv_len as i32);
    let (mut qh, mut kvh) = (shape.q_heads as i32, shape.kv_heads as i32);
    let mut scale = scale_log2;
    let mut params: [*mut c_void; 9] = [
        &mut q as *mut u64 as *mut c_void,
        &mut k as *mut u64 as *mut c_void,
        &mut v as *mut u64 as *mut c_void,
        &mut o as *mut u64 as *mut c_void,
        &mut q_len as *mut i32 as *mut c_void,
        &mut kv_len as *mut i32 as *mut c_void,
        &mut qh as *mut i32 as *mut c_void,
        &mut kvh as *mut i32 as *mut c_void,
        &mut scale as *mut f32 as *mut c_void,
    ];
    let grid = (
        shape.q_len.div_ceil(BLOCK_M) as u32,
        shape.q_heads as u32,
        1,
    );
    // SAFETY: buffers were validated against the shape; params match the kernel signature.
    unsafe { dev.launch(f, grid, (THREADS as u32, 1, 1), smem, &mut params) }
}

/// The wgmma kernel `f` on the schedule [`split_plan_for`] picks, then the
/// combine of its split partials.
#[allow(clippy::too_many_arguments)]
fn run_wgmma(
    dev: &CudaDevice,
    f: Function,
    shape: &AttentionShape,
    dtype: Dtype,
    scale_log2: f32,
    bufs: &RawBuffers,
    kv_stride: usize,
    smem: usize,
) -> Result<(), CudaError> {
    let plan = split_plan_for(dev, shape);
    let d = shape.head_dim;
    let partial_rows = plan.splits * plan.heads * plan.rows;
    // Split partials (f32 output rows and their log-sum-exp), from the caching allocator.
    let (part_o, part_lse) = if plan.splits > 1 {
        (
            Some(dev.alloc(partial_rows * d * 4)?),
            Some(dev.alloc(partial_rows * 4)?),
        )
    } else {
        (None, None)
    };
    let (mut q, mut k, mut v, mut o) = (bufs.q, bufs.k, bufs.v, bufs.out);
    let (mut q_len, mut kv_len) = (plan.rows as i32, shape.kv_len as i32);
    let (mut qh, mut kvh) = (plan.heads as i32, shape.kv_heads as i32);
    let mut scale = scale_log2;
    let mut stride = kv_stride as i64;
    let (mut period, mut splits) = (plan.period as i32, plan.splits as i32);
    let mut po = part_o.as_ref().map_or(0, |b| b.ptr());
    let mut pl = part_lse.as_ref().map_or(0, |b| b.ptr());
    let mut params: [*mut c_void; 14] = [
        &mut q as *mut u64 as *mut c_void,
        &mut k as *mut u64 as *mut c_void,
        &mut v as *mut u64 as *mut c_void,
        &mut o as *mut u64 as *mut c_void,
        &mut q_len as *mut i32 as *mut c_void,
        &mut kv_len as *mut i32 as *mut c_void,
        &mut qh as *mut i32 as *mut c_void,
        &mut kvh as *mut i32 as *mut c_void,
        &mut scale as *mut f32 as *mut c_void,
        &mut stride as *mut i64 as *mut c_void,
        &mut period as *mut i32 as *mut c_void,
        &mut splits as *mut i32 as *mut c_void,
        &mut po as *mut u64 as *mut c_void,
        &mut pl as *mut u64 as *mut c_void,
    ];
    let grid = (
        plan.rows.div_ceil(WGMMA_BLOCK_M) as u32,
        plan.heads as u32,
        plan.splits as u32,
    );
    // SAFETY: buffers were validated against the shape (packed rows are the
    // same head-major memory); the partials hold `partial_rows` rows; params
    // match the kernel signature.
    unsafe { dev.launch(f, grid, (WGMMA_THREADS, 1, 1), smem, &mut params)? };
    match (&part_o, &part_lse) {
        (Some(po), Some(pl)) => combine(dev, dtype, &plan, d, po.ptr(), pl.ptr(), bufs.out),
        _ => Ok(()),
    }
}

/// The split combine: `out` from the `plan.splits` partials (f32 rows
/// `part_o`, their log-sum-exp `part_lse`) of head dim `d`.
fn combine(
    dev: &CudaDevice,
    dtype: Dtype,
    plan: &SplitPlan,
    d: usize,
    part_o: u64,
    part_lse: u64,
    out: u64,
) -> Result<(), CudaError> {
    let combine = match dtype {
        Dtype::Bf16 => "attn_split_combine_bf16",
        _ => "attn_split_combine_f16",
    };
    let cf = dev.function(combine)?;
    let mut po = part_o;
    let mut pl = part_lse;
    let mut o = out;
    let mut rows = (plan.heads * plan.rows) as i32;
    let mut dd = d as i32;
    let mut sp = plan.splits as i32;
    let mut params: [*mut c_void; 6] = [
        &mut po as *mut u64 as *mut c_void,
        &mut pl as *mut u64 as *mut c_void,
        &mut o as *mut u64 as *mut c_void,
        &mut rows as *mut i32 as *mut c_void,
        &mut dd as *mut i32 as *mut c_void,
        &mut sp as *mut i32 as *mut c_void,
    ];
    let block = COMBINE_THREADS;
    let col_blocks = (d / (4 * COMBINE_QUADS)) as u32;
    // SAFETY: the partials hold `splits · rows` rows of `d`; out `rows · d`;
    // d / 64 column blocks cover d exactly (d ∈ {64, 128, 256}).
    unsafe {
        dev.launch(
            cf,
            (rows as u32, col_blocks, 1),
            (block, 1, 1),
            0,
            &mut params,
        )?
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::sources::{ATTENTION_FUSED, ATTENTION_FUSED_WGMMA};
    use super::*;
    use crate::kernels::source_constant as constant;

    #[test]
    fn launch_constants_match_the_kernel_sources() {
        let s = ATTENTION_FUSED.source;
        assert_eq!(constant(s, "WARP_ROWS") * constant(s, "NUM_WARPS"), BLOCK_M);
        assert_eq!(constant(s, "NUM_WARPS") * 32, THREADS);
        assert_eq!(constant(s, "BLOCK_N_MAX"), BLOCK_N_MAX);
        let w = ATTENTION_FUSED_WGMMA.source;
        assert_eq!(
            constant(w, "WG_ROWS") * constant(w, "NUM_WG"),
            WGMMA_BLOCK_M
        );
        assert_eq!(constant(w, "NUM_WG") * 128, WGMMA_THREADS as usize);
        assert_eq!(constant(w, "MIN_BLOCKS"), WGMMA_CTAS_PER_SM);
        assert_eq!(constant(w, "BLOCK_N"), BLOCK_N_MAX);
        assert!(w.contains("constexpr int THREADS = NUM_WG * 128;"));
        assert!(w.contains("BYTES = Q_BYTES + 2 * KV_BYTES + 1024;"));
        assert_eq!(constant(w, "COMBINE_THREADS") as u32, COMBINE_THREADS);
        assert!(constant(w, "COMBINE_MAX_SPLITS") >= MAX_SPLITS);
        assert_eq!(constant(w, "COMBINE_QUADS"), COMBINE_QUADS);
        // Every head dim is whole combine CTAs of quads, and the quads divide the threads.
        for d in [64usize, 128, 256] {
            assert_eq!(d % (4 * COMBINE_QUADS), 0, "d {d}");
        }
        assert_eq!(COMBINE_THREADS as usize % COMBINE_QUADS, 0);
    }

    fn shape(q_len: usize, kv_len: usize, q_heads: usize, kv_heads: usize) -> AttentionShape {
        AttentionShape {
            q_len,
            kv_len,
            q_heads,
            kv_heads,
            head_dim: 256,
            scale: None,
        }
    }

    #[test]
    fn decode_packs_the_gqa_group_and_splits_the_keys_over_the_gpu() {
        let p = split_plan(&shape(1, 32_769, 16, 2), 64, 2, 132);
        assert_eq!((p.rows, p.heads, p.period), (8, 2, 1));
        assert!(p.packed());
        assert_eq!(p.splits, MAX_SPLITS.min(132));
        // 2k of history: every split keeps at least MIN_SPLIT_TILES key tiles.
        let p = split_plan(&shape(1, 2049, 16, 2), 64, 2, 132);
        assert_eq!(p.splits, 2049usize.div_ceil(64) / MIN_SPLIT_TILES);
    }

    #[test]
    fn a_short_chunk_over_long_history_fills_one_wave_and_long_prompts_stay_unsplit() {
        // 512 rows after 32,256: 8 tiles × 16 heads = 128 CTAs of 264 slots → 2 splits.
        let p = split_plan(&shape(512, 32_768, 16, 2), 64, 2, 132);
        assert_eq!((p.rows, p.heads, p.splits), (512, 16, 2));
        assert!(!p.packed());
        // 2,048 rows after 30,720: 512 CTAs already fill the GPU.
        assert_eq!(
            split_plan(&shape(2048, 32_768, 16, 2), 64, 2, 132).splits,
            1
        );
        // Short keys are never split (the combine would cost more).
        assert_eq!(split_plan(&shape(300, 400, 4, 2), 64, 2, 132).splits, 1);
        // Multi-head attention (no group) is not packed.
        assert!(!split_plan(&shape(1, 4096, 4, 4), 64, 2, 132).packed());
    }

    #[test]
    fn shared_memory_fits_one_hopper_cta() {
        for d in headroom_core::fused_capability::FUSED_HEAD_DIMS {
            assert!(smem_bytes(d) <= 227 * 1024, "d{d}");
            assert!(wgmma_smem_bytes(d) <= 227 * 1024, "d{d}");
        }
        // The wgmma CTAs resident on one SM share its 228 KiB.
        assert!(WGMMA_CTAS_PER_SM * wgmma_smem_bytes(256) <= 228 * 1024);
    }
}
