//! Launch validation without a device (fake memory behind the buffers).

use super::*;
use crate::alloc::{Allocator, RawMemory};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Hands out increasing fake addresses; nothing is ever dereferenced.
#[derive(Default)]
struct Fake(AtomicU64);
impl RawMemory for Fake {
    fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
        Ok(0x1000 + self.0.fetch_add(bytes as u64, Ordering::SeqCst))
    }
    fn free(&self, _ptr: u64) {}
}

pub(super) struct Bufs {
    x: DeviceBuffer,
    logits: DeviceBuffer,
    gate_up: DeviceBuffer,
    down: DeviceBuffer,
    out: DeviceBuffer,
}

/// An allocator of fake memory (addresses from 0x1000 up, never freed).
pub(super) fn fake_memory() -> Arc<Allocator> {
    Allocator::new(Box::new(Fake::default()))
}

/// A fake tensor map told apart by its first word (never given to a kernel).
pub(super) fn fake_map(tag: u64) -> crate::tensor_map::TensorMap {
    // SAFETY: a tensor map is plain words; all zero is a valid value.
    let mut m: crate::tensor_map::TensorMap = unsafe { std::mem::zeroed() };
    m.0.opaque[0] = tag;
    m
}

/// The buffers of a launch of `t` tokens, `h` hidden, `e` experts of `i`.
pub(super) fn bufs(t: usize, h: usize, e: usize, i: usize) -> Bufs {
    let a = fake_memory();
    Bufs {
        x: a.alloc(t * h * 2).unwrap(),
        logits: a.alloc(t * e * 4).unwrap(),
        gate_up: a.alloc(e * 2 * i * h * 2).unwrap(),
        down: a.alloc(e * h * i * 2).unwrap(),
        out: a.alloc(t * h * 4).unwrap(),
    }
}

/// The launch of `b` with top-`k` routing.
pub(super) fn launch(b: &Bufs, t: usize, h: usize, e: usize, k: usize, i: usize) -> MoeLaunch<'_> {
    MoeLaunch {
        x: &b.x,
        router_logits: &b.logits,
        gate_up: &b.gate_up,
        down: &b.down,
        out: &b.out,
        tokens: t,
        hidden: h,
        experts: e,
        top_k: k,
        intermediate: i,
        renormalise: true,
    }
}

fn detail(r: Result<MoePlan, CudaError>) -> String {
    match r {
        Err(CudaError::Shape { detail, .. }) => detail,
        other => panic!("expected a shape error, got {other:?}"),
    }
}

#[test]
fn accepts_the_35b_shape_and_plans_chunked_passes() {
    let b = bufs(40_000, 2048, 256, 512);
    let plan = validate(&launch(&b, 40_000, 2048, 256, 8, 512)).unwrap();
    let chunk = CHUNK_TOKENS;
    assert_eq!(plan.chunk_tokens, chunk);
    assert_eq!(plan.chunk_pairs, chunk * 8);
    assert_eq!(plan.max_row_tiles, chunk * 8 / GEMM_BM + 256);
    // act (bf16 i per pair) + y (bf16 h per pair) dominate; the index arrays
    // add 16 bytes per pair, the counts and offsets a few per expert.
    let big = chunk * 8 * (512 + 2048) * 2;
    let tables = chunk * 8 * 16 + (1 << 20);
    assert!(
        plan.workspace_bytes >= big && plan.workspace_bytes < big + tables,
        "{} bytes for {chunk}-token passes",
        plan.workspace_bytes
    );
    let small = validate(&launch(&b, 7, 2048, 256, 8, 512)).unwrap();
    assert_eq!(small.chunk_tokens, 7);
    assert_eq!(
        small.max_row_tiles,
        1 + 56,
        "7·8 pairs: at most 56 experts hold a row"
    );
}

#[test]
fn zero_sizes_top_k_and_tile_multiples_are_rejected() {
    let b = bufs(16, 256, 8, 128);
    for (t, h, e, k, i, want) in [
        (0, 256, 8, 2, 128, "tokens must be > 0"),
        (16, 0, 8, 2, 128, "hidden must be > 0"),
        (16, 256, 0, 2, 128, "experts must be > 0"),
        (16, 256, 8, 0, 128, "top_k must be > 0"),
        (16, 256, 8, 2, 0, "intermediate must be > 0"),
        (16, 256, 8, 9, 128, "top_k 9 > experts 8"),
        (16, 192, 8, 2, 128, "hidden 192 is not a multiple of 128"),
        (16, 256, 8, 2, 96, "intermediate 96 is not a multiple of 64"),
    ] {
        assert_eq!(detail(validate(&launch(&b, t, h, e, k, i))), want);
    }
    let many = bufs(1, 128, 2048, 64);
    assert!(detail(validate(&launch(&many, 1, 128, 2048, 2, 64))).contains("2048 experts > 1024"));
}

#[test]
fn short_buffers_and_overflowing_sizes_are_rejected() {
    let b = bufs(16, 256, 8, 128);
    // 17 tokens need more x, logits and out than 16-token buffers hold.
    let d = detail(validate(&launch(&b, 17, 256, 8, 2, 128)));
    assert!(d.starts_with("buffer `x`"), "{d}");
    // More intermediate than the weights hold.
    let d = detail(validate(&launch(&b, 16, 256, 8, 2, 192)));
    assert!(d.starts_with("buffer `gate_up`"), "{d}");
    let d = detail(validate(&launch(&b, usize::MAX / 2, 256, 8, 2, 128)));
    assert!(d.contains("overflows") || d.contains("int range"), "{d}");
}

use super::launch::ELEMENTWISE_THREADS;
use crate::kernels::source_constant as constant;

#[test]
fn launch_constants_match_the_kernel_sources() {
    use super::sources::{MOE_GROUPED_GEMM, MOE_GROUPED_GEMM_WGMMA, MOE_ROUTE};
    for src in [MOE_GROUPED_GEMM.source, MOE_GROUPED_GEMM_WGMMA.source] {
        assert_eq!(constant(src, "BM"), GEMM_BM);
        assert_eq!(constant(src, "BN"), GEMM_BN);
        assert_eq!(constant(src, "BK"), GEMM_BK);
        let stages = constant(src, "STAGES");
        assert_eq!(stages * (GEMM_BM + GEMM_BN) * GEMM_BK * 2, GEMM_SMEM_BYTES);
    }
    assert!(MOE_GROUPED_GEMM
        .source
        .contains("constexpr int THREADS = WARPS_M * WARPS_N * 32;  // 256"));
    assert_eq!(
        constant(MOE_GROUPED_GEMM.source, "WARPS_M")
            * constant(MOE_GROUPED_GEMM.source, "WARPS_N")
            * 32,
        GEMM_THREADS
    );
    assert_eq!(
        constant(MOE_GROUPED_GEMM_WGMMA.source, "WARPGROUPS") * 128,
        GEMM_THREADS
    );
    assert!(MOE_GROUPED_GEMM_WGMMA
        .source
        .contains("SMEM_BYTES = STAGES * STAGE_BYTES + 1024;"));
    assert_eq!(GemmImpl::Wgmma.smem_bytes(), GEMM_SMEM_BYTES + 1024);
    assert_eq!(GemmImpl::MmaSync.smem_bytes(), GEMM_SMEM_BYTES);
    let r = MOE_ROUTE.source;
    assert_eq!(constant(r, "MAX_EXPERTS"), MAX_EXPERTS);
    assert_eq!(constant(r, "ROUTE_WARPS"), ROUTE_WARPS);
    assert_eq!(constant(r, "ROUTE_MAX_BLOCKS"), ROUTE_MAX_BLOCKS);
    assert_eq!(constant(r, "COUNT_STRIDE"), COUNT_STRIDE);
    assert_eq!(constant(r, "SCATTER_PER_THREAD"), SCATTER_PER_THREAD);
    assert_eq!(constant(r, "SCATTER_THREADS"), ELEMENTWISE_THREADS as usize);
    assert_eq!(constant(r, "COMBINE_THREADS"), ELEMENTWISE_THREADS as usize);
    assert_eq!(constant(r, "ROUTE_NARROW_EXPERTS"), ROUTE_NARROW_EXPERTS);
    assert_eq!(constant(r, "FUSED_SCATTER_PAIRS"), FUSED_SCATTER_PAIRS);
    assert_eq!(route_entry(ROUTE_NARROW_EXPERTS), "moe_route");
    assert_eq!(route_entry(ROUTE_NARROW_EXPERTS + 1), "moe_route_wide");
    assert_eq!(route_entry(8), "moe_route");
    // The last routing block's offsets: one thread a run of consecutive experts.
    assert_eq!(MAX_EXPERTS % (ROUTE_WARPS * 32), 0);
    assert_eq!(constant(r, "GEMM_BM"), GEMM_BM);
}

#[test]
fn narrow_kernels_run_one_cta_a_tile() {
    let s = GemmImpl::Wgmma.down(2048);
    assert_eq!(s.entry, "moe_gemm_down_wgmma_s_bf16");
    assert_eq!((s.tile_cols, s.smem), (128, GEMM_SMEM_BYTES + 1024));
    assert_eq!(
        GemmImpl::Wgmma.gate_up(512).entry,
        "moe_gemm_gate_up_wgmma_bf16"
    );
    assert!(!s.persistent && !s.tma_map);
    let m = GemmImpl::MmaSync;
    assert_eq!(
        (m.gate_up(512).entry, m.down(2048).entry),
        ("moe_gemm_gate_up_bf16", "moe_gemm_down_bf16")
    );
    // One CTA per tile.
    assert_eq!(s.grid(100, 2048, 132), 1600);
}

#[test]
fn hopper_streams_the_weights_up_to_sixteen_pairs_per_expert() {
    // 200-420 rows of top-8 over 256 experts (the decode and short prefill
    // steps) and one token stream; 513 tokens of top-8 are past the bar.
    for tokens in [1, 64, 200, 256, 420, 512] {
        assert_eq!(
            GemmImpl::for_pass("sm_90a", tokens * 8, 256),
            GemmImpl::Stream,
            "{tokens} tokens"
        );
    }
    assert_eq!(GemmImpl::for_pass("sm_90a", 513 * 8, 256), GemmImpl::Wgmma);
    // The bar is per expert: 8 experts take 128 pairs, not 129.
    assert_eq!(
        GemmImpl::for_pass("sm_90a", STREAM_ROWS_PER_EXPERT * 8, 8),
        GemmImpl::Stream
    );
    assert_eq!(
        GemmImpl::for_pass("sm_90a", STREAM_ROWS_PER_EXPERT * 8 + 1, 8),
        GemmImpl::Wgmma
    );
}

#[test]
fn streaming_kernels_are_persistent_with_their_shared_memory_and_ctas_per_sm() {
    use super::sources::MOE_GROUPED_GEMM_STREAM;
    let src = MOE_GROUPED_GEMM_STREAM.source;
    assert_eq!(constant(src, "BM"), GEMM_BM);
    assert_eq!(constant(src, "BW"), GEMM_BN);
    assert_eq!(constant(src, "BK"), GEMM_BK);
    assert_eq!(constant(src, "MAX_EXPERTS"), MAX_EXPERTS);
    assert!(src.contains("constexpr int THREADS = WARPS * 32;      // 256"));
    assert_eq!(GEMM_BN / 16 * 32, GEMM_THREADS);
    assert!(src.contains("SMEM_BYTES = STAGES * STAGE_BYTES + TABLE_BYTES + 1024;"));
    assert!(src.starts_with(concat!(
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("moe_tile_list.cuh")
    )));
    // Any sm_80+ GPU: no warpgroup MMA in the source.
    assert!(!src.contains("wgmma."));
    let stage = (GEMM_BN + constant(src, "NMAX")) * GEMM_BK * 2;
    let table = 2 * (MAX_EXPERTS + 1) * 4;
    assert_eq!(
        STREAM_SMEM_BYTES,
        constant(src, "STAGES") * stage + table + 1024
    );
    // Two CTAs per SM, each with the driver's 1 KiB reserve, in 228 KiB.
    const { assert!(2 * (STREAM_SMEM_BYTES + 1024) <= 228 * 1024) };
    let imp = GemmImpl::Stream;
    let (g, d) = (imp.gate_up(192), imp.down(384));
    assert_eq!(MOE_GROUPED_GEMM_STREAM.entry_points, [g.entry, d.entry]);
    assert_eq!(
        (g.entry, d.entry),
        ("moe_gemm_gate_up_stream_bf16", "moe_gemm_down_stream_bf16")
    );
    assert_eq!(
        (g.tile_cols, g.smem, g.threads, g.persistent, g.ctas_per_sm),
        (64, STREAM_SMEM_BYTES, 256, true, 2)
    );
    assert_eq!(
        (d.tile_cols, d.smem, d.ctas_per_sm),
        (128, STREAM_SMEM_BYTES, 2)
    );
    // Persistent: at most two CTAs per SM, never more than the tiles.
    assert_eq!(g.grid(300, 512, 132), 264);
    assert_eq!(d.grid(1, 384, 132), 3);
    assert!(!imp.hopper_only());
}

#[test]
fn local_expert_ranges_size_the_weights_and_must_lie_inside() {
    // A rank's range inside the 8 routed experts is accepted, one past it is not.
    let b = bufs(16, 256, 8, 128);
    let l = launch(&b, 16, 256, 8, 2, 128);
    assert!(validate_local(&l, 4, 4).is_ok());
    assert!(validate_local(&l, 0, 8).is_ok());
    assert!(detail(validate_local(&l, 6, 4)).contains("local experts 6+4 outside 0..8"));
    assert!(detail(validate_local(&l, 0, 0)).contains("outside"));
    assert!(detail(validate_local(&l, usize::MAX, 2)).contains("outside"));
}

#[test]
fn only_the_mma_sync_kernels_run_off_hopper() {
    assert!(GemmImpl::Wgmma.hopper_only() && GemmImpl::Ws.hopper_only());
    assert!(!GemmImpl::MmaSync.hopper_only());
    assert!(!GemmImpl::Stream.hopper_only());
}

#[test]
fn the_shared_epilogue_is_checked_and_the_f32_out_is_not_needed() {
    let (t, h, e, i) = (16, 256, 8, 128);
    let a = fake_memory();
    let b = bufs(t, h, e, i);
    let mut l = launch(&b, t, h, e, 2, i);
    let small = a.alloc(4).unwrap();
    l.out = &small; // not touched by the fused path
    let (gate, shared, out) = (
        a.alloc(h * 2).unwrap(),
        a.alloc(t * h * 2).unwrap(),
        a.alloc(t * h * 2).unwrap(),
    );
    let ok = SharedEpilogue {
        shared_gate: &gate,
        shared: &shared,
        out: &out,
        norm: None,
    };
    assert!(validate_shared(&l, 0, e, &ok).is_ok());
    assert!(detail(validate_local(&l, 0, e)).contains("`out`"));
    let short = a.alloc(t * h * 2 - 2).unwrap();
    let bad_out = SharedEpilogue { out: &short, ..ok };
    assert!(detail(validate_shared(&l, 0, e, &bad_out)).contains("`out`"));
    let bad_shared = SharedEpilogue {
        shared: &short,
        ..ok
    };
    assert!(detail(validate_shared(&l, 0, e, &bad_shared)).contains("`shared`"));
    let bad_gate = SharedEpilogue {
        shared_gate: &small,
        ..ok
    };
    assert!(detail(validate_shared(&l, 0, e, &bad_gate)).contains("`shared_gate`"));
}

#[test]
fn the_folded_norm_is_checked() {
    let (t, h, e, i) = (16, 256, 8, 128);
    let a = fake_memory();
    let b = bufs(t, h, e, i);
    let l = launch(&b, t, h, e, 2, i);
    let alloc = |n: usize| a.alloc(n).unwrap();
    let (gate, shared, out) = (alloc(h * 2), alloc(t * h * 2), alloc(t * h * 2));
    let (res, w, q, sc) = (
        alloc(t * h * 4),
        alloc(h * 4),
        alloc(t * h),
        alloc(t * h / 128 * 4),
    );
    let norm = NormEpilogue {
        residual: &res,
        weight: &w,
        eps: 1e-6,
        codes: Some((&q, &sc)),
    };
    let with = |n: NormEpilogue<'_>| {
        validate_shared(
            &l,
            0,
            e,
            &SharedEpilogue {
                shared_gate: &gate,
                shared: &shared,
                out: &out,
                norm: Some(n),
            },
        )
    };
    assert!(with(norm).is_ok());
    assert!(with(NormEpilogue {
        codes: None,
        ..norm
    })
    .is_ok());
    let short = alloc(4);
    for (bad, what) in [
        (
            NormEpilogue {
                residual: &short,
                ..norm
            },
            "`residual`",
        ),
        (
            NormEpilogue {
                weight: &short,
                ..norm
            },
            "`norm weight`",
        ),
        (
            NormEpilogue {
                codes: Some((&short, &sc)),
                ..norm
            },
            "`codes`",
        ),
        (
            NormEpilogue {
                codes: Some((&q, &short)),
                ..norm
            },
            "`scales`",
        ),
    ] {
        assert!(detail(with(bad)).contains(what), "{what}");
    }
    // The folded norm is the norm kernel's row on a block of as many threads.
    assert_eq!(NORM_EPILOGUE_MAX_COLS, crate::ops::norm::QUAD_MAX_COLS);
    assert_eq!(ELEMENTWISE_THREADS, crate::ops::norm::QUAD_THREADS);
    assert!(super::sources::MOE_ROUTE.source.contains(
        "COMBINE_NORM_MAX_COLS = 4 * headroom_norm_row::NORM_ROW_QUADS * COMBINE_THREADS;"
    ));
}

fn plan_of(chunk_tokens: usize) -> MoePlan {
    MoePlan {
        chunk_tokens,
        chunk_pairs: 0,
        max_row_tiles: 0,
        workspace_bytes: 0,
    }
}

fn passes(chunk: usize, tokens: usize) -> Vec<(usize, usize)> {
    plan_of(chunk)
        .passes(tokens)
        .map(|p| (p.t0, p.tokens))
        .collect()
}

/// The passes from 0, contiguous, covering exactly `tokens`, full but the
/// last, none empty.
fn assert_tiles_the_tokens(chunk: usize, tokens: usize) {
    let ps = passes(chunk, tokens);
    assert_eq!(ps.len(), tokens.div_ceil(chunk), "{chunk} {tokens}: {ps:?}");
    let mut next = 0;
    for (n, &(t0, tc)) in ps.iter().enumerate() {
        assert_eq!(t0, next, "{chunk} {tokens}: {ps:?}");
        assert!(tc >= 1 && tc <= chunk, "{chunk} {tokens}: {ps:?}");
        if n + 1 < ps.len() {
            assert_eq!(tc, chunk, "{chunk} {tokens}: {ps:?}");
        }
        next += tc;
    }
    assert_eq!(next, tokens, "{chunk} {tokens}: {ps:?}");
}

#[test]
fn passes_run_contiguous_full_chunks_then_the_rest() {
    assert_eq!(passes(4, 0), []);
    assert_eq!(passes(4, 1), [(0, 1)]);
    assert_eq!(passes(4, 3), [(0, 3)]);
    assert_eq!(passes(4, 4), [(0, 4)]);
    assert_eq!(passes(4, 5), [(0, 4), (4, 1)]);
    assert_eq!(passes(4, 12), [(0, 4), (4, 4), (8, 4)]);
    assert_eq!(passes(4, 14), [(0, 4), (4, 4), (8, 4), (12, 2)]);
    assert_eq!(passes(1, 3), [(0, 1), (1, 1), (2, 1)]);
    let c = CHUNK_TOKENS;
    for tokens in [0, 1, c - 1, c, c + 1, 3 * c, 3 * c + 7] {
        assert_tiles_the_tokens(c, tokens);
    }
    for chunk in 1..=9 {
        for tokens in 0..=40 {
            assert_tiles_the_tokens(chunk, tokens);
        }
    }
}

#[test]
fn a_validated_plan_passes_over_all_its_tokens() {
    let b = bufs(40_000, 128, 64, 64);
    let plan = validate(&launch(&b, 40_000, 128, 64, 8, 64)).unwrap();
    let ps: Vec<_> = plan.passes(40_000).collect();
    assert_eq!(
        ps.iter().map(|p| (p.t0, p.tokens)).collect::<Vec<_>>(),
        [(0, CHUNK_TOKENS), (CHUNK_TOKENS, 40_000 - CHUNK_TOKENS)]
    );
    // A full pass's grid bound is the plan's; a short one's is smaller.
    assert_eq!(ps[0].pairs(8), plan.chunk_pairs);
    assert_eq!(ps[0].max_row_tiles(8, 64), plan.max_row_tiles);
    assert_eq!(plan.max_row_tiles, 32_768 * 8 / 128 + 64);
    // 7,232 tokens of top-8: 57,856 pairs, 452 full tiles, a partial one per expert.
    assert_eq!(ps[1].max_row_tiles(8, 64), 452 + 64);
    let one = validate(&launch(&b, 1, 128, 64, 8, 64)).unwrap();
    let ps: Vec<_> = one.passes(1).collect();
    assert_eq!(ps.len(), 1);
    assert_eq!((ps[0].t0, ps[0].tokens), (0, 1));
    assert_eq!(ps[0].max_row_tiles(8, 64), one.max_row_tiles);
    assert_eq!(one.max_row_tiles, 1 + 8);
}

#[test]
#[should_panic]
fn a_plan_of_empty_passes_panics_instead_of_looping() {
    let _ = plan_of(0).passes(5);
}

#[test]
fn the_routing_grid_is_a_warp_a_token_up_to_its_block_limit() {
    use super::launch::route_blocks;
    assert_eq!(route_blocks(1), 1);
    assert_eq!(route_blocks(ROUTE_WARPS), 1);
    assert_eq!(route_blocks(ROUTE_WARPS + 1), 2);
    assert_eq!(
        route_blocks(ROUTE_WARPS * ROUTE_MAX_BLOCKS),
        ROUTE_MAX_BLOCKS
    );
    assert_eq!(route_blocks(32_768), ROUTE_MAX_BLOCKS);
}
