//! The warp-specialised FP8 grouped GEMMs under routings no random test
//! makes (every token on eight experts, exact row counts an expert around
//! the 64-row half units, hot experts, few experts, and the engine's
//! calibration step): many runs each, each against the tile kernels' bits,
//! each caught by the watchdog if it hangs.

use super::*;

/// Router logits putting token t's top-8 on `pick(t)` (in that order).
fn assigned_logits(tokens: usize, experts: usize, pick: impl Fn(usize) -> [usize; 8]) -> Vec<f32> {
    let mut l = vec![-20.0f32; tokens * experts];
    for t in 0..tokens {
        for (j, &e) in pick(t).iter().enumerate() {
            l[t * experts + e] = 10.0 - j as f32;
        }
    }
    l
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): the warp-specialised FP8 GEMMs under skewed routings, against the tile kernels"]
fn warp_specialised_fp8_gemms_finish_and_match_the_tiles_under_skewed_routings() {
    let dev = device();
    let (h, i, e, k) = (2048usize, 512usize, 256usize, 8usize);
    let w = RandomFp8Experts::new(&dev, h, i, e, &mut rand::rngs::StdRng::seed_from_u64(11));
    let scales = w.scales();
    type Pick = Box<dyn Fn(usize) -> [usize; 8]>;
    // (name, tokens, runs, each token's experts)
    let cases: Vec<(&str, usize, usize, Pick)> = vec![
        (
            "all tokens on experts 0-7",
            4096,
            25,
            Box::new(|_| [0, 1, 2, 3, 4, 5, 6, 7]),
        ),
        (
            "64 rows an expert",
            2048,
            25,
            Box::new(move |t| std::array::from_fn(|j| (t * 8 + j) % 256)),
        ),
        (
            "65 rows an expert",
            2080,
            25,
            Box::new(move |t| std::array::from_fn(|j| (t * 8 + j) % 256)),
        ),
        (
            "128 rows an expert",
            4096,
            25,
            Box::new(move |t| std::array::from_fn(|j| (t * 8 + j) % 256)),
        ),
        (
            "129 rows an expert",
            4128,
            25,
            Box::new(move |t| std::array::from_fn(|j| (t * 8 + j) % 256)),
        ),
        (
            "two hot experts, the rest spread",
            4096,
            25,
            Box::new(move |t| {
                std::array::from_fn(|j| if j < 2 { j } else { 2 + (t * 6 + j) % 254 })
            }),
        ),
        (
            "16 experts",
            3000,
            25,
            Box::new(move |t| std::array::from_fn(|j| (t + j * 2) % 16)),
        ),
        // The engine's calibration step (4,096 tokens over all 256 experts,
        // 80-200 rows each): half the experts end in a unit of at most 64
        // rows, which the second MMA warpgroup skips. Session 34's servers
        // hung there (a skipping warpgroup's leader released steps its other
        // warps had not reached); many runs, as the race needs a lagging warp.
        (
            "hashed routing over 256 experts",
            4096,
            200,
            Box::new(move |t| {
                let h = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let (start, step) = ((h >> 8) as usize % 256, 1 + 2 * ((h >> 40) as usize % 128));
                std::array::from_fn(|j| (start + j * step) % 256)
            }),
        ),
    ];
    for (name, tokens, runs, pick) in cases {
        let x = dev
            .upload(&host::bf16_bits(&uniform_bf16(tokens as u64, tokens * h)))
            .unwrap();
        let lg = dev.upload(&assigned_logits(tokens, e, pick)).unwrap();
        let out = dev.alloc(tokens * h * 4).unwrap();
        let l = w.launch(&x, &lg, &out, tokens, k);
        let run = |gemms| {
            dev.fill_bytes(&out, 0xFF).unwrap();
            routed_on(&dev, &l, scales, gemms);
        };
        run(Fp8Gemms::Tiles);
        let mut want = vec![0u32; tokens * h];
        dev.read(&out, &mut want).unwrap();
        for it in 0..runs {
            run(Fp8Gemms::Ws);
            wait_or_abort(&dev, &format!("{name}, {tokens} tokens, run {it}"), 10);
            let mut got = vec![0u32; tokens * h];
            dev.read(&out, &mut got).unwrap();
            let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
            assert_eq!(
                differ, 0,
                "{name}, {tokens} tokens, run {it}: {differ} outputs differ from the tiles'"
            );
        }
        println!(
            "fp8 ws under skew: {name}, {tokens} tokens: {runs} runs finished, the tiles' bits"
        );
    }
}
