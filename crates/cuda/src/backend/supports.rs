//! What the CUDA backend runs, op by op, with the reason when it does not.
//! Fused attention answers from the capability table of
//! `headroom_core::fused_capability` (bf16 activations on CUDA); composed
//! runs any full-attention shape with whole query groups.

use super::external::GDN_HEAD_DIM;
use super::fallback::{MAX_DK, MAX_DV, MAX_EXPERTS};
use headroom_core::fused_capability::fused_support;
use headroom_core::{AttentionKind, BackendKind, Dtype, LayerKind, OpKey, RouteRequest};

fn attention(route: RouteRequest, layer: &LayerKind) -> Result<(), String> {
    // Activations are bf16 on CUDA whatever the checkpoint's dtype.
    let kind = LayerKind {
        dtype: Dtype::Bf16,
        ..*layer
    };
    match route {
        RouteRequest::Fused => fused_support(BackendKind::Cuda, &kind),
        RouteRequest::Composed { .. } => {
            if kind.attention != AttentionKind::Full {
                return Err(format!(
                    "{} attention layers have no softmax attention",
                    kind.attention
                ));
            }
            if kind.head_dim == 0
                || kind.kv_heads == 0
                || !kind.q_heads.is_multiple_of(kind.kv_heads)
            {
                return Err(format!(
                    "q_heads {} is not a multiple of kv_heads {} (head_dim {})",
                    kind.q_heads, kind.kv_heads, kind.head_dim
                ));
            }
            Ok(())
        }
    }
}

pub(crate) fn supports(op: &OpKey) -> Result<(), String> {
    match op {
        OpKey::Attention { route, layer } => attention(*route, layer),
        // Head dims GDN_HEAD_DIM run the chunked kernel, others the recurrent fallback.
        OpKey::GatedDeltaRule { k_dim, v_dim }
            if *k_dim == 0 || *k_dim > MAX_DK || *v_dim == 0 || *v_dim > MAX_DV =>
        {
            Err(format!(
                "gated delta rule head dims {k_dim}/{v_dim}: the chunked kernel takes \
                 {GDN_HEAD_DIM}/{GDN_HEAD_DIM}, the fallback k_dim <= {MAX_DK}, v_dim <= {MAX_DV}"
            ))
        }
        OpKey::Moe { num_experts, top_k } if *top_k == 0 || top_k > num_experts => {
            Err(format!("top_k {top_k} must be in 1..={num_experts}"))
        }
        OpKey::Moe { num_experts, .. } if *num_experts > MAX_EXPERTS => Err(format!(
            "{num_experts} experts: the routing kernels take at most {MAX_EXPERTS}"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(head_dim: usize, q_heads: usize, kv_heads: usize) -> LayerKind {
        LayerKind {
            attention: AttentionKind::Full,
            head_dim,
            q_heads,
            kv_heads,
            dtype: Dtype::F32,
        }
    }

    #[test]
    fn fused_follows_the_capability_table_with_bf16_activations() {
        // An f32 checkpoint still runs fused: activations are bf16 on CUDA.
        assert!(supports(&OpKey::Attention {
            route: RouteRequest::Fused,
            layer: full(256, 16, 2)
        })
        .is_ok());
        let e = supports(&OpKey::Attention {
            route: RouteRequest::Fused,
            layer: full(96, 16, 2),
        })
        .unwrap_err();
        assert!(e.contains("96"), "{e}");
    }

    #[test]
    fn composed_runs_any_head_dim_but_needs_whole_groups() {
        let c = RouteRequest::Composed { query_block: 128 };
        assert!(supports(&OpKey::Attention {
            route: c,
            layer: full(96, 16, 2)
        })
        .is_ok());
        assert!(supports(&OpKey::Attention {
            route: c,
            layer: full(128, 16, 3)
        })
        .is_err());
        let mut linear = full(128, 16, 2);
        linear.attention = AttentionKind::Linear;
        assert!(supports(&OpKey::Attention {
            route: c,
            layer: linear
        })
        .is_err());
    }

    #[test]
    fn gdn_and_moe_shapes_are_checked_and_plain_ops_are_supported() {
        let gdn = |d| supports(&OpKey::GatedDeltaRule { k_dim: d, v_dim: d });
        assert!(gdn(GDN_HEAD_DIM).is_ok());
        assert!(gdn(16).is_ok(), "small dims run the fallback rule");
        assert!(gdn(MAX_DK + 1).unwrap_err().contains("fallback"));
        assert!(supports(&OpKey::Moe {
            num_experts: 8,
            top_k: 9
        })
        .is_err());
        assert!(supports(&OpKey::Moe {
            num_experts: MAX_EXPERTS + 1,
            top_k: 8
        })
        .is_err());
        for op in [
            OpKey::Embed,
            OpKey::Linear,
            OpKey::RmsNorm,
            OpKey::Rope,
            OpKey::Conv1dSilu,
            OpKey::Sample,
        ] {
            assert!(supports(&op).is_ok(), "{}", op.name());
        }
    }
}
