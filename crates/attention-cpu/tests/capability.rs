//! Every combination the fused capability table lists for the CPU backend
//! runs and matches the f64 reference; anything else is refused.

mod common;

use common::{check, shape};
use half::{bf16, f16};
use headroom_core::fused_capability::{fused_support, CPU_FUSED_DTYPES, FUSED_HEAD_DIMS};
use headroom_core::{AttentionKind, BackendKind, Dtype, LayerKind, RouteRequest};

#[test]
fn every_cpu_fused_combination_runs_and_matches_reference() {
    let mut ran = 0;
    for &head_dim in &FUSED_HEAD_DIMS {
        for &dtype in &CPU_FUSED_DTYPES {
            for (q_heads, kv_heads) in [(16, 2), (4, 4)] {
                let kind = LayerKind {
                    attention: AttentionKind::Full,
                    head_dim,
                    q_heads,
                    kv_heads,
                    dtype,
                };
                assert!(fused_support(BackendKind::Cpu, &kind).is_ok(), "{kind}");
                let s = shape(33, 47, q_heads, kv_heads, head_dim);
                match dtype {
                    Dtype::F32 => check::<f32>(&s, RouteRequest::Fused, 1e-5),
                    Dtype::F16 => check::<f16>(&s, RouteRequest::Fused, 1e-2),
                    Dtype::Bf16 => check::<bf16>(&s, RouteRequest::Fused, 1e-2),
                };
                ran += 1;
            }
        }
    }
    assert_eq!(ran, FUSED_HEAD_DIMS.len() * CPU_FUSED_DTYPES.len() * 2);
}
