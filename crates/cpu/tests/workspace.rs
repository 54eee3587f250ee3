//! The CPU backend's workspace account (`Backend::workspace_model`) against
//! what its attention calls report allocating (the keys and values gathered
//! from the block pool and one kernel call over every KV head): exact for a
//! first chunk and for a later chunk over history.

use headroom_core::ops::{AttentionCall, Backend, Batch, KvSpec};
use headroom_core::{AttentionKind, Dtype, LayerKind, RouteRequest};
use headroom_cpu::CpuBackend;

const HEADS: usize = 8;
const KV_HEADS: usize = 2;
const D: usize = 64;

fn layer() -> LayerKind {
    LayerKind {
        attention: AttentionKind::Full,
        head_dim: D,
        q_heads: HEADS,
        kv_heads: KV_HEADS,
        dtype: Dtype::F32,
    }
}

fn act(be: &CpuBackend, rows: usize, cols: usize, salt: usize) -> headroom_cpu::CpuAct {
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7 + salt) % 13) as f32 / 13.0 - 0.5)
        .collect();
    be.act_from_f32(rows, cols, &data).unwrap()
}

/// Writes `rows` rows after `history` and runs attention: its report's
/// transient bytes and the backend's prediction for that call.
fn run(
    be: &CpuBackend,
    cache: &mut headroom_cpu::CpuKvCache,
    history: usize,
    rows: usize,
    route: RouteRequest,
) -> (u64, u64) {
    let batch = Batch::single(0, history, rows);
    let (k, v) = (
        act(be, rows, KV_HEADS * D, 1),
        act(be, rows, KV_HEADS * D, 2),
    );
    be.kv_write(cache, &k, &v, &batch).unwrap();
    let q = act(be, rows, HEADS * D, 3);
    let (_, report) = be.attention(&q, cache, &batch, route).unwrap();
    let predicted = be.workspace_model().attention_bytes(&AttentionCall {
        layer: layer(),
        route,
        q_len: rows,
        kv_len: history + rows,
        total_kv_len: history + rows,
    });
    (report.transient_bytes, predicted)
}

#[test]
fn the_prediction_is_what_an_attention_call_allocates() {
    let be = CpuBackend::new();
    for route in [
        RouteRequest::Composed { query_block: 0 },
        RouteRequest::Composed { query_block: 32 },
        RouteRequest::Fused,
    ] {
        for rows in [1, 100, 257] {
            let mut cache = be
                .new_kv_cache(&KvSpec::contiguous(1, KV_HEADS, D, 4096))
                .unwrap();
            let (reported, predicted) = run(&be, &mut cache, 0, rows, route);
            assert!(reported > 0);
            assert_eq!(predicted, reported, "{route:?}, {rows} rows");
            let (reported, predicted) = run(&be, &mut cache, rows, 40, route);
            assert!(reported > 0);
            assert_eq!(predicted, reported, "{route:?}, 40 rows after {rows}");
        }
    }
}

#[test]
fn composed_grows_with_the_keys_and_fused_only_by_the_gathered_rows() {
    let ws = CpuBackend::new().workspace_model();
    let at = |route, kv_len| {
        ws.attention_bytes(&AttentionCall {
            layer: layer(),
            route,
            q_len: 512,
            kv_len,
            total_kv_len: kv_len,
        })
    };
    let composed = RouteRequest::Composed { query_block: 128 };
    assert!(at(composed, 8192) > 4 * at(composed, 1024));
    // Fused: the kernel's scratch is fixed; only the gathered K/V (f32) grow.
    let gathered = (8192 - 1024) * 2 * KV_HEADS * D * 4;
    assert_eq!(
        at(RouteRequest::Fused, 8192) - at(RouteRequest::Fused, 1024),
        gathered as u64
    );
}
