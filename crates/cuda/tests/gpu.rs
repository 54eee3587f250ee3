//! GPU tests: `#[ignore]`d (no GPU in CI); on the GPU machine run this test
//! binary with `--include-ignored`. Run without a device they fail, never pass.

use headroom_core::{AttentionError, AttentionShape, Dtype, RouteRequest};
use headroom_cuda::attention::{composed_workspace_bytes, prefill, AttentionBuffers};
use headroom_cuda::check::{run_case, CheckCase};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::{timing, CudaError};

fn device() -> Option<CudaDevice> {
    match CudaDevice::open(0) {
        Ok(d) => Some(d),
        Err(e) => panic!("this test needs a CUDA GPU: {e}"),
    }
}

fn shape(q_len: usize, kv_len: usize, head_dim: usize) -> AttentionShape {
    AttentionShape {
        q_len,
        kv_len,
        q_heads: 4,
        kv_heads: 2,
        head_dim,
        scale: None,
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run this test binary with --include-ignored on the GPU machine"]
fn fused_has_no_transient_memory_and_composed_reports_its_workspace() {
    let Some(dev) = device() else { return };
    let s = shape(300, 400, 256);
    let inputs = timing::random_inputs(&dev, &s, Dtype::Bf16, 7).unwrap();
    let fused = prefill(
        &dev,
        &s,
        Dtype::Bf16,
        RouteRequest::Fused,
        &inputs.buffers(),
    )
    .unwrap();
    assert_eq!(fused.transient_bytes, 0);
    assert_eq!(fused.query_block, None);
    let composed = prefill(
        &dev,
        &s,
        Dtype::Bf16,
        RouteRequest::Composed { query_block: 128 },
        &inputs.buffers(),
    )
    .unwrap();
    assert_eq!(composed.query_block, Some(128));
    let ws = composed_workspace_bytes(&s, Dtype::Bf16, 128) as u64;
    assert!(
        composed.transient_bytes >= ws && composed.transient_bytes < ws + (8 << 20),
        "{} vs workspace {ws}",
        composed.transient_bytes
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run this test binary with --include-ignored on the GPU machine"]
fn unsupported_dtype_head_dim_and_buffer_length_are_typed_errors() {
    let Some(dev) = device() else { return };
    let s = shape(64, 64, 96);
    let inputs = timing::random_inputs(&dev, &s, Dtype::F16, 1).unwrap();
    let e = prefill(&dev, &s, Dtype::F16, RouteRequest::Fused, &inputs.buffers()).unwrap_err();
    assert!(
        matches!(
            e,
            CudaError::Attention(AttentionError::UnsupportedHeadDim { head_dim: 96, .. })
        ),
        "{e}"
    );
    let s2 = shape(64, 64, 128);
    let e = prefill(
        &dev,
        &s2,
        Dtype::F16,
        RouteRequest::Fused,
        &inputs.buffers(),
    )
    .unwrap_err();
    assert!(
        matches!(e, CudaError::Attention(AttentionError::BufferLength { .. })),
        "{e}"
    );
    let small = shape(8, 8, 64);
    let qo = dev.alloc(small.q_elems() * 4).unwrap();
    let kv = dev.alloc(small.kv_elems() * 4).unwrap();
    let bufs = AttentionBuffers {
        q: &qo,
        k: &kv,
        v: &kv,
        out: &qo,
    };
    let e = prefill(&dev, &small, Dtype::F32, RouteRequest::Fused, &bufs).unwrap_err();
    assert!(
        matches!(
            e,
            CudaError::Attention(AttentionError::UnsupportedDtype { .. })
        ),
        "{e}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run this test binary with --include-ignored on the GPU machine"]
fn both_routes_match_the_f64_reference_with_history_gqa_and_a_nan_key() {
    let Some(dev) = device() else { return };
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 64 },
    ] {
        for dtype in [Dtype::Bf16, Dtype::F16] {
            let case = CheckCase {
                route,
                dtype,
                head_dim: 256,
                q_len: 200,
                kv_len: 261,
                q_heads: 4,
                kv_heads: 1,
                nan_key: Some(100),
            };
            let r = run_case(&dev, &case, 42).unwrap();
            assert!(r.passed, "{r:?}");
            assert!(r.rows_compared > 0);
        }
    }
}
