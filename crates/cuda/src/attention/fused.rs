//! Launches the fused prefill kernel (`attention_fused.cu`). The tile
//! constants here must match the kernel's.

use super::RawBuffers;
use crate::device::CudaDevice;
use crate::{kernels, CudaError};
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
/// `HEADROOM_FUSED_IMPL=mma|wgmma` overrides (wgmma only where the arch has it).
pub fn fused_impl(arch: &str) -> FusedImpl {
    let hopper = arch == "sm_90a";
    match std::env::var("HEADROOM_FUSED_IMPL").as_deref() {
        Ok("mma") => FusedImpl::MmaSync,
        Ok("wgmma") if hopper => FusedImpl::Wgmma,
        _ if hopper => FusedImpl::Wgmma,
        _ => FusedImpl::MmaSync,
    }
}

/// Warpgroups per CTA of the wgmma kernel (64 query rows each). 1 by default:
/// 64-row CTAs, two per SM, whose softmax and GEMM phases interleave; on the
/// H200 that ran 3-13 % faster at head dim 256 and 7-27 % at 128/64 than one
/// 128-row CTA per SM, and 5-12 % faster at head dim 256 than one 128-row CTA
/// with two K/V stages (docs/perf/cuda-attention.md). `HEADROOM_WGMMA_WARPGROUPS=2`
/// selects the latter. NVRTC gets the same value as a define (`nvrtc::code_options`).
pub fn wgmma_warpgroups() -> usize {
    match std::env::var("HEADROOM_WGMMA_WARPGROUPS").as_deref() {
        Ok("2") => 2,
        _ => 1,
    }
}

/// Query rows per CTA of the wgmma kernel.
pub fn wgmma_block_m() -> usize {
    64 * wgmma_warpgroups()
}

/// K/V stages of the wgmma kernel (`HEADROOM_WG_STAGES`): two with two
/// warpgroups (one 128-row CTA per SM has the room), one with one warpgroup
/// (two 64-row CTAs share the SM).
pub fn wgmma_stages() -> usize {
    if wgmma_warpgroups() == 2 {
        2
    } else {
        1
    }
}

/// Dynamic shared memory of the wgmma kernel: Q tile + a K and a V tile per
/// stage, plus 1 KiB to align them to the 128-byte swizzle period.
pub fn wgmma_smem_bytes(head_dim: usize) -> usize {
    (wgmma_block_m() + 2 * BLOCK_N_MAX * wgmma_stages()) * head_dim * 2 + 1024
}

/// Dynamic shared memory reserved for `head_dim`: Q tile + one K and one V
/// tile of the largest tile width (an upper bound of what the kernel uses).
pub fn smem_bytes(head_dim: usize) -> usize {
    (BLOCK_M + 2 * BLOCK_N_MAX) * head_dim * 2
}

pub(super) fn run(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    scale_log2: f32,
    bufs: &RawBuffers,
) -> Result<(), CudaError> {
    let imp = fused_impl(&dev.arch);
    let entry = match imp {
        FusedImpl::MmaSync => kernels::fused_entry(shape.head_dim, dtype),
        FusedImpl::Wgmma => kernels::fused_wgmma_entry(shape.head_dim, dtype),
    };
    let entry = entry.ok_or_else(|| AttentionError::UnsupportedHeadDim {
        head_dim: shape.head_dim,
        route: "fused",
        backend: "cuda",
        supported: FUSED_HEAD_DIMS.to_vec(),
    })?;
    let f = dev.function(entry)?;
    let smem = match imp {
        FusedImpl::MmaSync => smem_bytes(shape.head_dim),
        FusedImpl::Wgmma => wgmma_smem_bytes(shape.head_dim),
    };
    dev.set_dynamic_smem(f, smem)?;
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
    let (block_m, threads) = match imp {
        FusedImpl::MmaSync => (BLOCK_M, THREADS),
        FusedImpl::Wgmma => (wgmma_block_m(), 2 * wgmma_block_m()),
    };
    let grid = (
        shape.q_len.div_ceil(block_m) as u32,
        shape.q_heads as u32,
        1,
    );
    // SAFETY: buffers were validated against the shape; params match the kernel signature.
    unsafe { dev.launch(f, grid, (threads as u32, 1, 1), smem, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{ATTENTION_FUSED, ATTENTION_FUSED_WGMMA};

    use crate::kernels::source_constant as constant;

    #[test]
    fn launch_constants_match_the_kernel_sources() {
        let s = ATTENTION_FUSED.source;
        assert_eq!(constant(s, "WARP_ROWS") * constant(s, "NUM_WARPS"), BLOCK_M);
        assert_eq!(constant(s, "NUM_WARPS") * 32, THREADS);
        assert_eq!(constant(s, "BLOCK_N_MAX"), BLOCK_N_MAX);
        let w = ATTENTION_FUSED_WGMMA.source;
        assert_eq!(constant(w, "WG_ROWS") * wgmma_warpgroups(), wgmma_block_m());
        assert_eq!(constant(w, "BLOCK_N"), BLOCK_N_MAX);
        assert!(w.contains("constexpr int THREADS = NUM_WG * 128;"));
        assert!(w.contains("#define HEADROOM_WG_STAGES (HEADROOM_WGMMA_WARPGROUPS == 2 ? 2 : 1)"));
        assert!(w.contains("BYTES = Q_BYTES + 2 * STAGES * KV_BYTES + 1024;"));
    }

    #[test]
    fn shared_memory_fits_one_hopper_cta() {
        for d in headroom_core::fused_capability::FUSED_HEAD_DIMS {
            assert!(smem_bytes(d) <= 227 * 1024, "d{d}");
            assert!(wgmma_smem_bytes(d) <= 227 * 1024, "d{d}");
        }
        // Two 64-row wgmma CTAs per SM (the default) must share the SM's 228 KiB.
        if wgmma_warpgroups() == 1 {
            assert!(2 * wgmma_smem_bytes(256) <= 228 * 1024);
        }
    }
}
