//! The fused-kernel capability table: which layer shapes each backend's fused
//! attention kernel supports.
//!
//! The kernels own this table: the CPU and CUDA attention crates test that
//! every combination listed here runs and matches the f64 reference, so the
//! policy never picks a fused route a kernel cannot execute.

use crate::{AttentionKind, BackendKind, Dtype, LayerKind};

/// Head dims the fused kernels are instantiated for, on every backend.
pub const FUSED_HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// Storage dtypes of the CPU fused kernel.
pub const CPU_FUSED_DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

/// Storage dtypes of the CUDA fused kernels (tensor-core MMA needs 16-bit inputs).
pub const CUDA_FUSED_DTYPES: [Dtype; 2] = [Dtype::F16, Dtype::Bf16];

/// `Ok(())` when `backend`'s fused kernel supports `kind`, else the reason it does not.
pub fn fused_support(backend: BackendKind, kind: &LayerKind) -> Result<(), String> {
    if kind.attention != AttentionKind::Full {
        return Err(format!(
            "{} attention layers have no softmax attention",
            kind.attention
        ));
    }
    if !FUSED_HEAD_DIMS.contains(&kind.head_dim) {
        return Err(format!(
            "head_dim {} not in the fused kernels' {:?}",
            kind.head_dim, FUSED_HEAD_DIMS
        ));
    }
    let dtypes: &[Dtype] = match backend {
        BackendKind::Cpu => &CPU_FUSED_DTYPES,
        BackendKind::Cuda => &CUDA_FUSED_DTYPES,
    };
    if !dtypes.contains(&kind.dtype) {
        return Err(format!(
            "dtype {} not supported by the {} fused kernel",
            kind.dtype, backend
        ));
    }
    if kind.kv_heads == 0 || !kind.q_heads.is_multiple_of(kind.kv_heads) {
        return Err(format!(
            "q_heads {} is not an integer multiple of kv_heads {}",
            kind.q_heads, kind.kv_heads
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(head_dim: usize, dtype: Dtype) -> LayerKind {
        LayerKind {
            attention: AttentionKind::Full,
            head_dim,
            q_heads: 16,
            kv_heads: 2,
            dtype,
        }
    }

    #[test]
    fn d256_bf16_and_f16_supported_on_both_backends() {
        for b in [BackendKind::Cpu, BackendKind::Cuda] {
            assert!(fused_support(b, &full(256, Dtype::Bf16)).is_ok());
            assert!(fused_support(b, &full(256, Dtype::F16)).is_ok());
        }
    }

    #[test]
    fn unsupported_shapes_give_reasons() {
        assert!(fused_support(BackendKind::Cuda, &full(256, Dtype::F32))
            .unwrap_err()
            .contains("f32"));
        assert!(fused_support(BackendKind::Cpu, &full(96, Dtype::Bf16))
            .unwrap_err()
            .contains("96"));
        let mut odd = full(128, Dtype::Bf16);
        odd.kv_heads = 3;
        assert!(fused_support(BackendKind::Cpu, &odd).is_err());
        let mut linear = full(128, Dtype::Bf16);
        linear.attention = AttentionKind::Linear;
        assert!(fused_support(BackendKind::Cpu, &linear).is_err());
    }
}
