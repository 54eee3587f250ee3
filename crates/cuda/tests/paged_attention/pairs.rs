//! The pairs kernel (`attn_paged_pairs_d256_*`: two query heads of a KV
//! group a CTA, a producer warpgroup streaming the shared key tiles) against
//! the heads kernel bit for bit and against f64: prompts with row tails,
//! chunks after history, keys not multiples of 64, GQA 8 and 2, the gate,
//! NaN in one sequence's keys; and where it must not run.

use super::*;
use headroom_cuda::attention::PagedKernel;

/// Whole-head chunks only: a fresh prompt with a row tail, a chunk of 100
/// rows after 1,000 of history, 64 rows over 4,000 keys, 200 rows after 63.
fn chunks(q_heads: usize, kv_heads: usize) -> Case {
    Case {
        seqs: vec![(130, 130), (100, 1100), (64, 4000), (200, 263)],
        q_heads,
        kv_heads,
        d: 256,
    }
}

fn forced(kernel: PagedKernel) -> PagedOptions {
    PagedOptions {
        splits: Some(1),
        kernel: Some(kernel),
        ..PagedOptions::default()
    }
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn pairs_give_the_heads_kernels_bits_and_match_f64() {
    let dev = device();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for (nq, nkv) in [(16, 2), (4, 2)] {
            let c = chunks(nq, nkv);
            let h = c.host(dtype, 41 + nq as u64);
            for gated in [false, true] {
                let what = format!("{dtype:?} {nq}/{nkv} gated {gated}");
                let (pairs, ran) = run_opts(&dev, dtype, &c, &h, gated, forced(PagedKernel::Pairs));
                assert_eq!(ran.kernel, PagedKernel::Pairs, "{what}");
                let (heads, ran_heads) =
                    run_opts(&dev, dtype, &c, &h, gated, forced(PagedKernel::Heads));
                assert_eq!(ran_heads.kernel, PagedKernel::Heads, "{what}");
                assert_eq!(
                    ran.items * 2,
                    ran_heads.items,
                    "{what}: a CTA a pair of heads"
                );
                let differ = pairs
                    .iter()
                    .zip(&heads)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                assert_eq!(
                    differ, 0,
                    "{what}: elements differing from the heads kernel"
                );
                check_per_sequence(&c, &h, &pairs, &h.reference(&c, gated), &what);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn the_default_runs_pairs_for_long_prompts_and_heads_for_decode_rows() {
    let dev = device();
    // 16 / 2 over two prompts of whole heads: 416 CTAs, enough for one split.
    let c = Case {
        seqs: vec![(640, 640), (130, 1000)],
        q_heads: 16,
        kv_heads: 2,
        d: 256,
    };
    let h = c.host(Dtype::Bf16, 9);
    let (got, ran) = run_opts(&dev, Dtype::Bf16, &c, &h, true, PagedOptions::default());
    assert_eq!((ran.kernel, ran.splits), (PagedKernel::Pairs, 1));
    check_per_sequence(&c, &h, &got, &h.reference(&c, true), "default pairs");
    // A mixed batch packs its decode rows: the heads kernel, and forcing pairs is refused.
    let m = mixed(16, 2, 256);
    let hm = m.host(Dtype::Bf16, 10);
    let (_, ran) = run_opts(&dev, Dtype::Bf16, &m, &hm, false, PagedOptions::default());
    assert_eq!(ran.kernel, PagedKernel::Heads);
    let shape = PagedShape {
        cu_seqlens: &hm.cu,
        kv_lens: &hm.kv_lens,
        tables: &hm.tables,
        q_heads: 16,
        kv_heads: 2,
        head_dim: 256,
    };
    let buf = dev.alloc(hm.q.len() * 2).unwrap();
    let bufs = PagedBuffers {
        q: buf.ptr(),
        k: buf.ptr(),
        v: buf.ptr(),
        out: buf.ptr(),
        gate: None,
    };
    // SAFETY: refused before any launch (the plan packs decode rows).
    let refused =
        unsafe { paged_raw_with(&dev, Dtype::Bf16, &shape, &bufs, forced(PagedKernel::Pairs)) };
    assert!(refused.is_err());
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn nan_in_one_sequences_keys_stays_in_that_sequence_on_pairs() {
    let dev = device();
    let c = chunks(16, 2);
    let mut h = c.host(Dtype::Bf16, 5);
    // Key 7 of sequence 1 (a chunk after history, visible to all its rows), KV head 1.
    h.k[1][(7 * 2 + 1) * 256] = f32::NAN;
    let (got, ran) = run_opts(&dev, Dtype::Bf16, &c, &h, false, forced(PagedKernel::Pairs));
    assert_eq!(ran.kernel, PagedKernel::Pairs);
    let w = 16 * 256;
    let want = h.reference(&c, false);
    for r in h.cu[1]..h.cu[2] {
        let row = &got[r * w..(r + 1) * w];
        assert!(
            row[..8 * 256].iter().all(|x| x.is_finite()),
            "row {r}, KV head 0"
        );
        assert!(
            row[8 * 256..].iter().all(|x| x.is_nan()),
            "row {r}, KV head 1"
        );
    }
    for i in [0, 2, 3] {
        let r = h.cu[i] * w..h.cu[i + 1] * w;
        let e = rel_err(&got[r.clone()], &want[r]);
        assert!(e < 1.5e-2, "sequence {i} after a NaN key elsewhere: {e}");
    }
}
