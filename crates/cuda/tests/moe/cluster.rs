//! The cluster-multicast grouped GEMMs ([`GemmImpl::Cluster`]) and the
//! warp-specialised ones ([`GemmImpl::ClusterWs`], [`GemmImpl::Ws`]) beside
//! the wide ones they derive from: the same results bit for bit (same tiles,
//! same wgmma order, same epilogues), and the routed block timed side by side
//! at 2,048 / 8,192 / 32,768 tokens (one pass) on the 35B-A3B shape. (The f64
//! cases of `moe.rs` run them among every family; a memcheck case runs the
//! warp-specialised ones.)

use super::{
    check_on, compare, launch, median, reference, run, timed_call, upload, Bench35b, Case, Shape,
    QWEN35B, SMALL,
};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::moe::{grouped_gemm_flops, routed_experts_marked, GemmImpl, MoeLaunch};

/// The families derived from Wide, bit-identical to it.
const MC_IMPS: [GemmImpl; 3] = [GemmImpl::Cluster, GemmImpl::ClusterWs, GemmImpl::Ws];

/// The device's f32 out of one call on `imp`, as bits.
fn out_bits(dev: &CudaDevice, l: &MoeLaunch<'_>, imp: GemmImpl) -> Vec<u32> {
    routed_experts_marked(dev, l, Some(imp), &mut |_| Ok(())).unwrap();
    let mut out = vec![0f32; l.tokens * l.hidden];
    dev.read(l.out, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

/// Indices of the first few elements where `a` and `b` differ.
fn first_diffs(a: &[u32], b: &[u32]) -> Vec<usize> {
    (0..a.len()).filter(|&i| a[i] != b[i]).take(4).collect()
}

#[test]
#[ignore = "needs an sm_90a GPU: run by the mcgemm GPU script"]
fn cluster_kernels_equal_the_wide_ones_bit_for_bit() {
    let dev = super::device();
    if dev.arch != "sm_90a" {
        return;
    }
    // Pairs are 256 rows of an expert, an expert's last pair split in 64-row
    // units (rank 0 the larger part). 512 tokens of the 35B shape: ~16 rows
    // an expert (one warpgroup of rank 0 computes, the rest idle); over 8
    // experts of top-2, 333 tokens (~83 rows: 64 + 19), 1,500 (~375 rows: a
    // full pair, then 64 + 55) and 2,000 (~500 rows: a full pair, then
    // 128 + 116).
    for (s, seed) in [
        (
            Shape {
                tokens: 512,
                ..QWEN35B
            },
            900,
        ),
        (
            Shape {
                tokens: 333,
                ..SMALL
            },
            901,
        ),
        (
            Shape {
                tokens: 1500,
                ..SMALL
            },
            902,
        ),
        (
            Shape {
                tokens: 2000,
                ..SMALL
            },
            903,
        ),
    ] {
        let c = Case::random(s, seed);
        let d = upload(&dev, &c);
        let l = launch(&c.s, &d);
        let w = out_bits(&dev, &l, GemmImpl::Wide);
        for imp in MC_IMPS {
            let diffs = first_diffs(&w, &out_bits(&dev, &l, imp));
            println!(
                "mc bits: imp={imp:?} tokens={} hidden={} experts={} differing={}",
                s.tokens,
                s.hidden,
                s.experts,
                diffs.len()
            );
            assert!(
                diffs.is_empty(),
                "{imp:?} {s:?}: first differences at {diffs:?}"
            );
        }
    }
    // The bench shape at 8,192 tokens (2-3 row tiles an expert).
    let w35 = Bench35b::new(&dev);
    let (inputs, _) = Bench35b::inputs(&dev, 8192, 4);
    let l = w35.launch(&inputs);
    let w = out_bits(&dev, &l, GemmImpl::Wide);
    for imp in MC_IMPS {
        let diffs = first_diffs(&w, &out_bits(&dev, &l, imp));
        println!(
            "mc bits: imp={imp:?} tokens=8192 hidden=2048 experts=256 differing={}",
            diffs.len()
        );
        assert!(
            diffs.is_empty(),
            "{imp:?} 8,192 tokens: first differences at {diffs:?}"
        );
    }
}

#[test]
#[ignore = "needs an sm_90a GPU: run by the mcgemm GPU script"]
fn cluster_kernels_match_the_f64_reference_on_small_and_wide_shapes() {
    // Every f64 case of `moe.rs` runs Cluster among all families; this is
    // its quick subset for the GPU script, Wide beside it.
    let dev = super::device();
    if dev.arch != "sm_90a" {
        return;
    }
    let imps = [
        Some(GemmImpl::Wide),
        Some(GemmImpl::Cluster),
        Some(GemmImpl::ClusterWs),
        Some(GemmImpl::Ws),
    ];
    for (n, tokens) in [1usize, 7, 100, 333, 1500].into_iter().enumerate() {
        check_on(&dev, Shape { tokens, ..SMALL }, 950 + n as u64, &imps);
    }
    // Widths the wide tiles do not divide (one GEMM falls back) and top-1.
    for (k, h, i) in [(1, 256, 128), (8, 256, 192), (4, 384, 256)] {
        let s = Shape {
            tokens: 57,
            hidden: h,
            top_k: k,
            inter: i,
            ..SMALL
        };
        check_on(&dev, s, 955 + k as u64, &imps);
    }
    check_on(
        &dev,
        Shape {
            tokens: 512,
            ..QWEN35B
        },
        960,
        &imps,
    );
}

#[test]
#[ignore = "needs an sm_90a GPU: run by the mcgemm GPU script"]
fn cluster_sanitizer_case() {
    // Small enough for compute-sanitizer, on the warp-specialised families
    // (Cluster ran clean before them): 600 tokens of top-2 over 8 experts
    // (~150 rows an expert: 128 + 22), 40 tokens (~10 rows: rank 1 idle),
    // one NaN row.
    let dev = super::device();
    if dev.arch != "sm_90a" {
        return;
    }
    for (tokens, seed) in [(600, 970), (40, 971)] {
        let mut c = Case::random(Shape { tokens, ..SMALL }, seed);
        c.logits[3 * SMALL.experts] = f32::NAN;
        let want = reference(&c);
        for imp in [GemmImpl::ClusterWs, GemmImpl::Ws] {
            let got = run(&dev, &c, Some(imp));
            let err = compare(&c, &got, &want, &[3]);
            println!("mc sanitizer case: imp={imp:?} tokens={tokens} rel err {err:.2e}");
            assert!(err <= 2e-2);
        }
    }
}

#[test]
#[ignore = "needs an sm_90a GPU: run by the mcgemm GPU script"]
fn timing_cluster_vs_wide_routed_block() {
    let dev = super::device();
    let s = QWEN35B;
    let w = Bench35b::new(&dev);
    for tokens in [2048usize, 8192, 32768] {
        let (inputs, _) = Bench35b::inputs(&dev, tokens, 4);
        let l = w.launch(&inputs);
        for imp in [
            GemmImpl::Wide,
            GemmImpl::Cluster,
            GemmImpl::ClusterWs,
            GemmImpl::Ws,
        ] {
            for _ in 0..3 {
                routed_experts_marked(&dev, &l, Some(imp), &mut |_| Ok(())).unwrap();
            }
            dev.synchronize().unwrap();
            let (mut total, mut gu, mut dn) = (vec![], vec![], vec![]);
            for _ in 0..15 {
                let (t, per) = timed_call(&dev, &l, Some(imp));
                total.push(t);
                gu.push(per[1]);
                dn.push(per[2]);
            }
            let (gu, dn) = (median(&mut gu), median(&mut dn));
            let flops = grouped_gemm_flops(tokens, s.hidden, s.top_k, s.inter);
            println!(
                "mc timing: imp={imp:?} tokens={tokens} gate_up_ms={gu:.4} down_ms={dn:.4} gemms_ms={:.4} block_ms={:.4} gemm_tflops={:.0} runs=15",
                gu + dn,
                median(&mut total),
                flops / ((gu + dn) * 1e-3) / 1e12
            );
        }
    }
}
