//! Tests of launch.rs: each kernel family's parameters in its signature's order.

use super::super::tests::{bufs, fake_map as map, fake_memory, launch as moe_launch};
use super::params::Param;
use super::*;
use crate::ops::moe::NormEpilogue;

/// The parameters as comparable values (a map by its first word).
fn values(p: &Params) -> Vec<(char, u64)> {
    p.0.iter()
        .map(|v| match v {
            Param::Ptr(v) => ('p', *v),
            Param::Int(v) => ('i', *v as u64),
            Param::F32(v) => ('f', v.to_bits() as u64),
            Param::Map(m) => ('m', m.0.opaque[0]),
        })
        .collect()
}

#[test]
fn each_family_takes_its_operands_then_the_tile_list_then_a_map() {
    let (t, h, e, i) = (64, 256, 8, 128);
    let b = bufs(t, h, e, i);
    let l = moe_launch(&b, t, h, e, 2, i);
    let mem = fake_memory();
    let buf = || mem.alloc(4).unwrap();
    let counts = buf();
    let sched = counts.ptr() + 0x100;
    let r = RouteBuffers {
        topk_expert: buf(),
        topk_weight: buf(),
        slot_token: buf(),
        pair_slot: buf(),
        counts,
        sched,
        expert_offsets: buf(),
        tile_offsets: buf(),
    };
    let (act, y) = (buf(), buf());
    let (st, a, yp) = (r.slot_token.ptr(), act.ptr(), y.ptr());
    let (eo, to) = (r.expert_offsets.ptr(), r.tile_offsets.ptr());
    let ws = Workspace { r, act, y };
    let local = 6;
    let pass = Pass { t0: 16, tokens: 32 };
    let x = pass.x(&l);
    assert_eq!(x, l.x.ptr() + 16 * 256 * 2);
    let (gu, dn) = (l.gate_up.ptr(), l.down.ptr());
    let got = |g: GroupedGemm<'_>| values(&g.params(&ws.r, local));
    let gate_up = |a: &[u64], w| got(GroupedGemm::new(Gemm::GateUp, &l, &ws, a, w));
    let down = |a: &[u64], w| got(GroupedGemm::new(Gemm::Down, &l, &ws, a, w));
    // The kernels' signatures: the operands, then the tile list.
    let tiles = |p: Params, k: usize, n: usize| p.ptr(eo).ptr(to).int(local).int(k).int(n);
    let p = Params::new;

    // mma.sync, wgmma and streaming: the weights' address after A.
    assert_eq!(
        gate_up(&[x, st], GemmWeights::Bf16(gu)),
        values(&tiles(p().ptr(x).ptr(st).ptr(gu).ptr(a), h, i))
    );
    assert_eq!(
        down(&[a], GemmWeights::Bf16(dn)),
        values(&tiles(p().ptr(a).ptr(dn).ptr(yp), i, h))
    );

    // Warp-specialised: no weights' address; each GEMM's own two unit
    // counters, then the map.
    assert_eq!(
        gate_up(&[x, st], GemmWeights::Map(map(7))),
        values(
            &tiles(p().ptr(x).ptr(st).ptr(a), h, i)
                .ptr(sched)
                .map(map(7))
        )
    );
    assert_eq!(
        down(&[a], GemmWeights::Map(map(9))),
        values(&tiles(p().ptr(a).ptr(yp), i, h).ptr(sched + 8).map(map(9)))
    );

    // FP8: A's codes and scales, then the weights' codes and scales.
    let (xq, xs, aq, as_) = (0x10, 0x20, 0x30, 0x40);
    let (gs, ds) = (0x50, 0x60);
    assert_eq!(
        gate_up(&[xq, xs, st], GemmWeights::Fp8(gu, gs)),
        values(&tiles(
            p().ptr(xq).ptr(xs).ptr(st).ptr(gu).ptr(gs).ptr(a),
            h,
            i
        ))
    );
    assert_eq!(
        down(&[aq, as_], GemmWeights::Fp8(dn, ds)),
        values(&tiles(p().ptr(aq).ptr(as_).ptr(dn).ptr(ds).ptr(yp), i, h))
    );

    // Warp-specialised FP8: A's codes and scales, the weights' scales (their
    // codes come by the map), then as the bf16 warp-specialised kernels.
    assert_eq!(
        gate_up(&[xq, xs, st], GemmWeights::Fp8Map(gs, map(11))),
        values(
            &tiles(p().ptr(xq).ptr(xs).ptr(st).ptr(gs).ptr(a), h, i)
                .ptr(sched)
                .map(map(11))
        )
    );
    assert_eq!(
        down(&[aq, as_], GemmWeights::Fp8Map(ds, map(13))),
        values(
            &tiles(p().ptr(aq).ptr(as_).ptr(ds).ptr(yp), i, h)
                .ptr(sched + 8)
                .map(map(13))
        )
    );
}

#[test]
fn each_combine_takes_the_pass_rows_in_its_signatures_order() {
    let (t, h, e, i) = (64, 256, 8, 128);
    let b = bufs(t, h, e, i);
    let l = moe_launch(&b, t, h, e, 2, i);
    let mem = fake_memory();
    let buf = || mem.alloc(4).unwrap();
    let r = RouteBuffers {
        topk_expert: buf(),
        topk_weight: buf(),
        slot_token: buf(),
        pair_slot: buf(),
        counts: buf(),
        sched: 0,
        expert_offsets: buf(),
        tile_offsets: buf(),
    };
    let (tw, ps) = (r.topk_weight.ptr(), r.pair_slot.ptr());
    let ws = Workspace {
        r,
        act: buf(),
        y: buf(),
    };
    let pass = Pass { t0: 16, tokens: 32 };
    // y, the picks' weights and slots, top_k, hidden: every combine's start.
    let head = || Params::new().ptr(ws.y.ptr()).ptr(tw).ptr(ps).int(2).int(h);
    let call = |s: Option<&SharedEpilogue<'_>>| {
        let (entry, p) = combine_call(&l, pass, s, &ws);
        (entry, values(&p))
    };
    assert_eq!(
        call(None),
        (
            "moe_combine",
            values(&head().ptr(l.out.ptr() + 16 * h as u64 * 4))
        )
    );
    let (gate, shared, out) = (buf(), buf(), buf());
    let (res, w, q, sc) = (buf(), buf(), buf(), buf());
    let row = 16 * h as u64 * 2;
    let shared_head = || {
        head()
            .ptr(l.x.ptr() + row)
            .ptr(gate.ptr())
            .ptr(shared.ptr() + row)
    };
    let mut s = SharedEpilogue {
        shared_gate: &gate,
        shared: &shared,
        out: &out,
        norm: None,
    };
    assert_eq!(
        call(Some(&s)),
        (
            "moe_combine_shared",
            values(&shared_head().ptr(out.ptr() + row))
        )
    );
    // The folded norm: the residual's f32 rows, the weight, the normed rows,
    // (codes: their e4m3 rows and f32 scale rows,) eps last.
    let norm = NormEpilogue {
        residual: &res,
        weight: &w,
        eps: 1e-6,
        codes: None,
    };
    let normed = || {
        shared_head()
            .ptr(res.ptr() + 16 * h as u64 * 4)
            .ptr(w.ptr())
            .ptr(out.ptr() + row)
    };
    s.norm = Some(norm);
    assert_eq!(
        call(Some(&s)),
        ("moe_combine_shared_norm", values(&normed().f32(1e-6)))
    );
    s.norm = Some(NormEpilogue {
        codes: Some((&q, &sc)),
        ..norm
    });
    assert_eq!(
        call(Some(&s)),
        (
            "moe_combine_shared_norm_fp8",
            values(
                &normed()
                    .ptr(q.ptr() + 16 * h as u64)
                    .ptr(sc.ptr() + 16 * (h / 128) as u64 * 4)
                    .f32(1e-6)
            )
        )
    );
}
