//! Sampling on the device, and the small every-kernel case memcheck runs.

use super::*;

/// The CPU backend's sampling rule (the reference every backend follows).
fn sample_ref(logits: &[f32], p: &SamplingParams, step: u64) -> Option<u32> {
    headroom_cpu::sample::sample_row(logits, p, step)
}

fn params(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_p,
        top_k,
        seed,
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn sampling_is_greedy_on_ties_deterministic_and_follows_the_cpu_rule() {
    let be = backend();
    // Greedy: lowest index among equal maxima; NaN and -inf ignored.
    let row = [0.5f32, f32::NAN, 3.0, 1.0, 3.0, f32::NEG_INFINITY];
    let l = act(&be, 1, row.len(), &row);
    assert_eq!(
        be.sample(&l, &[params(0.0, 1.0, 0, 1)], &[0]).unwrap(),
        vec![2]
    );
    let dead = act(&be, 1, 2, &[f32::NAN, f32::NAN]);
    assert!(be.sample(&dead, &[params(1.0, 1.0, 0, 1)], &[0]).is_err());

    // Distribution: p = (0.25, 0.75, 0) over 2000 steps; top-p / top-k cuts.
    let n = 2000;
    let three = [0.0f32, 3f32.ln(), f32::NEG_INFINITY];
    let rows: Vec<f32> = (0..n).flat_map(|_| three).collect();
    let la = act(&be, n, 3, &rows);
    let steps: Vec<u64> = (0..n as u64).collect();
    let draw = |p: SamplingParams| be.sample(&la, &vec![p; n], &steps).unwrap();
    let a = draw(params(1.0, 1.0, 0, 7));
    assert_eq!(
        a,
        draw(params(1.0, 1.0, 0, 7)),
        "same seed and steps, same tokens"
    );
    assert_ne!(a, draw(params(1.0, 1.0, 0, 8)));
    let ones = a.iter().filter(|&&t| t == 1).count() as f64 / n as f64;
    assert!((ones - 0.75).abs() < 0.04, "p(1) = {ones}");
    assert!(!a.contains(&2));
    assert!(
        draw(params(1.0, 0.7, 0, 3)).iter().all(|&t| t == 1),
        "top_p 0.7 keeps only the 0.75 token"
    );
    assert!(
        draw(params(1.0, 1.0, 1, 3)).iter().all(|&t| t == 1),
        "top_k 1 is greedy"
    );

    // Random bf16 logits (many ties), mixed parameters: agree with the CPU rule.
    let (rows_n, vocab) = (300, 1000);
    let logits = uniform(60, rows_n * vocab, 6.0);
    let ps: Vec<SamplingParams> = (0..rows_n)
        .map(|i| match i % 4 {
            0 => params(0.0, 1.0, 0, i as u64),
            1 => params(0.8, 1.0, 0, i as u64),
            2 => params(1.2, 0.9, 50, i as u64),
            _ => params(0.5, 0.6, 0, i as u64),
        })
        .collect();
    let st: Vec<u64> = (0..rows_n as u64).map(|i| i * 3 + 1).collect();
    let got = be
        .sample(&act(&be, rows_n, vocab, &logits), &ps, &st)
        .unwrap();
    let agree = (0..rows_n)
        .filter(|&i| Some(got[i]) == sample_ref(&logits[i * vocab..(i + 1) * vocab], &ps[i], st[i]))
        .count();
    assert!(
        agree >= rows_n - 3,
        "{agree} of {rows_n} rows agree with the CPU rule"
    );

    // A 262144-token vocabulary, greedy and sampled.
    let big = 262_144;
    let mut lg = uniform(61, big, 4.0);
    lg[200_001] = 9.0;
    lg[250_000] = 9.0;
    let lb = act(&be, 2, big, &[lg.clone(), lg.clone()].concat());
    let t = be
        .sample(
            &lb,
            &[params(0.0, 1.0, 0, 0), params(0.7, 0.95, 40, 9)],
            &[0, 5],
        )
        .unwrap();
    assert_eq!(t[0], 200_001);
    assert_eq!(Some(t[1]), sample_ref(&lg, &params(0.7, 0.95, 40, 9), 5));
}

/// Batches of greedy rows only take the split argmax (slices of 8192 logits,
/// then one CTA per row): ties across slices go to the lowest index, NaN and
/// ±inf are never picked, a row without a finite logit is an error, and
/// random bf16 rows (many ties) agree with the CPU rule.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn greedy_batches_split_the_argmax_and_follow_the_cpu_rule() {
    let be = backend();
    let greedy = |n: usize| vec![params(0.0, 1.0, 0, 0); n];
    // 3 rows of 20,001 logits (3 slices, the last a tail of 3,617).
    let vocab = 20_001;
    let mut rows = uniform(70, 3 * vocab, 4.0);
    // Row 0: equal maxima in slices 2 and 1 -> the lower index (slice 1).
    rows[19_000] = 8.0;
    rows[9_000] = 8.0;
    // Row 1: +inf and NaN beside the finite maximum in the tail.
    rows[vocab + 5] = f32::INFINITY;
    rows[vocab + 6] = f32::NAN;
    rows[vocab + 20_000] = 7.5;
    // Row 2: the maximum at index 0.
    rows[2 * vocab] = 9.0;
    let l = act(&be, 3, vocab, &rows);
    let got = be.sample(&l, &greedy(3), &[0, 1, 2]).unwrap();
    assert_eq!(got, vec![9_000, 20_000, 0]);
    for (i, &t) in got.iter().enumerate() {
        let row = &rows[i * vocab..(i + 1) * vocab];
        assert_eq!(
            Some(t),
            sample_ref(row, &params(0.0, 1.0, 0, 0), 0),
            "row {i}"
        );
    }
    // A row of NaN and -inf only: an error, as on the CPU.
    let mut dead = vec![f32::NAN; 2 * 9000];
    dead[9000..].copy_from_slice(&uniform(71, 9000, 1.0));
    dead[17] = f32::NEG_INFINITY;
    assert!(be
        .sample(&act(&be, 2, 9000, &dead), &greedy(2), &[0, 0])
        .is_err());
    // Random rows rounded to bf16 (ties common): 40 rows of 100,003 (the
    // scalar slices) and 40 of 100,000 (a multiple of 8: 16-byte loads).
    for (seed, v) in [(72, 100_003), (73, 100_000)] {
        let n = 40;
        let lg = uniform(seed, n * v, 3.0);
        let l = act(&be, n, v, &lg);
        // The reference sees the same bf16 values the kernel reads.
        let bf = be.act_to_f32(&l).unwrap();
        let got = be.sample(&l, &greedy(n), &vec![0; n]).unwrap();
        for i in 0..n {
            let want = sample_ref(&bf[i * v..(i + 1) * v], &params(0.0, 1.0, 0, 0), 0);
            assert_eq!(Some(got[i]), want, "vocab {v} row {i}");
        }
    }
}

/// The 16-byte argmax slices (bf16 rows of a multiple of 8 logits) keep the
/// rule at the edges of a load and of a slice: ties inside one 8-logit load
/// and across slices go to the lowest index, NaN and ±inf beside the maximum
/// are never picked, a slice tail of one load, and a row without a finite
/// logit is an error.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn greedy_rows_of_eights_take_16_byte_loads_and_the_same_rule() {
    let be = backend();
    let greedy = |n: usize| vec![params(0.0, 1.0, 0, 0); n];
    // 3 slices: 8192 + 8192 + 8 (the tail is one load).
    let vocab = 16_392;
    let mut rows = uniform(74, 4 * vocab, 4.0);
    // Row 0: equal maxima at 8,195 and 8,193 (one load) and 16,390 (the tail).
    rows[8_195] = 8.0;
    rows[8_193] = 8.0;
    rows[16_390] = 8.0;
    // Row 1: NaN, +inf and -inf in the maximum's load; the maximum last of it.
    rows[vocab + 40] = f32::NAN;
    rows[vocab + 41] = f32::INFINITY;
    rows[vocab + 42] = f32::NEG_INFINITY;
    rows[vocab + 47] = 7.5;
    // Row 2: the maximum in the tail's last logit; row 3: at index 0.
    rows[3 * vocab - 1] = 9.0;
    rows[3 * vocab] = 9.0;
    let l = act(&be, 4, vocab, &rows);
    let bf = be.act_to_f32(&l).unwrap();
    let got = be.sample(&l, &greedy(4), &[0, 1, 2, 3]).unwrap();
    assert_eq!(got, vec![8_193, 47, vocab as u32 - 1, 0]);
    for (i, &t) in got.iter().enumerate() {
        let want = sample_ref(&bf[i * vocab..(i + 1) * vocab], &params(0.0, 1.0, 0, 0), 0);
        assert_eq!(Some(t), want, "row {i}");
    }
    let mut dead = vec![f32::NAN; 2 * 8192];
    dead[8192..].copy_from_slice(&uniform(75, 8192, 1.0));
    dead[9] = f32::NEG_INFINITY;
    dead[10] = f32::INFINITY;
    assert!(be
        .sample(&act(&be, 2, 8192, &dead), &greedy(2), &[0, 0])
        .is_err());
}

/// A small case of every kernel, for compute-sanitizer (memcheck) runs.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn small_every_kernel_once() {
    let be = backend();
    let spec = gdn_spec(2);
    let c = spec.conv_dim();
    let b = Batch::packed(&[(1, 0, 3), (0, 0, 2)]);
    let x = act(&be, 5, c, &uniform(90, 5 * c, 1.0));
    let mut st = be.new_gdn_state(&spec).unwrap();
    let y = be
        .conv1d_silu(&x, &vector(&be, &uniform(91, c * 4, 1.0)), &mut st, &b)
        .unwrap();
    let mut r = be
        .linear(&y, &matrix(&be, 70, c, &uniform(92, 70 * c, 0.1)))
        .unwrap();
    let n = be
        .add_rms_norm(&mut r, None, &vector(&be, &[0.1; 70]), 1e-6)
        .unwrap();
    let mut q = be
        .linear(&n, &matrix(&be, 128, 70, &uniform(93, 128 * 70, 0.1)))
        .unwrap();
    be.rms_norm_groups(&mut q, &vector(&be, &[0.0; 64]), 1e-6)
        .unwrap();
    be.rope(
        &mut q,
        2,
        64,
        &RopeSpec {
            rotary_dim: 16,
            theta: 1e4,
        },
        &b,
    )
    .unwrap();
    let kvs = KvSpec::contiguous(2, 1, 64, 8);
    let mut cache = be.new_kv_cache(&kvs).unwrap();
    let k = be.gather_rows(&q, &[0, 1, 2, 3, 4]).unwrap();
    let k1 = be
        .linear(&k, &matrix(&be, 64, 128, &uniform(94, 64 * 128, 0.1)))
        .unwrap();
    be.kv_write(&mut cache, &k1, &k1, &b).unwrap();
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 2 },
    ] {
        let (mut o, _) = be.attention(&q, &cache, &b, route).unwrap();
        // The output gate in the transpose back to token-major.
        be.attention_gated(&q, &cache, &b, route, &o).unwrap();
        let z = be.swiglu(&o, &q).unwrap();
        be.gated_rms_norm(&mut o, &z, &vector(&be, &[1.0; 64]), 1e-6)
            .unwrap();
        be.mul_sigmoid(&mut o, &z).unwrap();
    }
    let e = be
        .embed(&matrix(&be, 10, 70, &uniform(95, 700, 1.0)), &[1, 9])
        .unwrap();
    // The f32 residual stream's add + norm, pairs (70 columns) and general (69).
    let mut r32 = be
        .embed(
            &matrix(&be, 10, 70, &uniform(96, 700, 1.0)),
            &[1, 9, 0, 3, 2],
        )
        .unwrap();
    be.add_rms_norm(&mut r32, Some(&r), &vector(&be, &[0.1; 70]), 1e-6)
        .unwrap();
    let mut r69 = be
        .embed(
            &matrix(&be, 10, 69, &uniform(97, 690, 1.0)),
            &[1, 9, 0, 3, 2],
        )
        .unwrap();
    be.add_rms_norm(&mut r69, None, &vector(&be, &[0.1; 69]), 1e-6)
        .unwrap();
    // The 16-byte kernel (columns % 4 == 0).
    let mut r72 = be
        .embed(
            &matrix(&be, 10, 72, &uniform(98, 720, 1.0)),
            &[1, 9, 0, 3, 2],
        )
        .unwrap();
    be.add_rms_norm(&mut r72, None, &vector(&be, &[0.1; 72]), 1e-6)
        .unwrap();
    let t = be
        .sample(
            &e,
            &[params(0.0, 1.0, 0, 1), params(0.9, 0.8, 5, 2)],
            &[0, 1],
        )
        .unwrap();
    assert!(t.iter().all(|&v| v < 70));
    be.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn tokens_drawn_for_later_are_the_sampled_ones_and_feed_the_next_embedding() {
    let be = backend();
    // 37 rows of 5,000 random logits (greedy and seeded ones), drawn now and
    // drawn for later: the same tokens, read after more work was queued.
    let (rows, vocab) = (37, 5000);
    let logits = uniform(41, rows * vocab, 4.0);
    let l = act(&be, rows, vocab, &logits);
    let ps: Vec<SamplingParams> = (0..rows)
        .map(|r| match r % 3 {
            0 => params(0.0, 1.0, 0, 0),
            1 => params(0.9, 0.95, 0, 17 + r as u64),
            _ => params(1.2, 1.0, 40, 5),
        })
        .collect();
    let steps: Vec<u64> = (0..rows as u64).map(|r| r * 3).collect();
    let now = be.sample(&l, &ps, &steps).unwrap();
    let later = be.sample_later(&l, &ps, &steps).unwrap();
    // The next step's embedding queued before the tokens are read: holes in
    // any order beside known ids, over a table of random bf16 rows (what
    // the device holds, so rows compare exactly).
    let (h, n) = (70, 6);
    let table = uniform(96, vocab * h, 1.0);
    let t = matrix(&be, vocab, h, &table);
    poison_pool(&be, n * h * 4);
    let ids = [4, 0, 4999, 0, 0, 17];
    let holes = [(1, 36), (3, 0), (4, 20)];
    let e = be.embed_drawn(&t, &ids, &holes, &later).unwrap();
    assert_eq!(be.read_drawn(&later).unwrap(), now, "the same tokens");
    let want = headroom_core::ops::fill_holes(&ids, &holes, &now).unwrap();
    let got = be.act_to_f32(&e).unwrap();
    for (r, &id) in want.iter().enumerate() {
        assert_eq!(
            got[r * h..(r + 1) * h],
            table[id as usize * h..(id as usize + 1) * h],
            "row {r}: id {id}"
        );
    }
    // Bad holes and host ids are refused before anything is queued.
    assert!(be.embed_drawn(&t, &ids, &[(6, 0)], &later).is_err());
    assert!(be.embed_drawn(&t, &ids, &[(0, 37)], &later).is_err());
    assert!(be.embed_drawn(&t, &[5000, 0], &[(1, 0)], &later).is_err());
    // A row without a finite logit: its embedding row is NaN, and reading
    // the draw is the error `sample` gives.
    let dead = act(&be, 2, 3, &[0.0, 1.0, 0.5, f32::NAN, f32::NAN, f32::NAN]);
    let greedy = [params(0.0, 1.0, 0, 0), params(0.0, 1.0, 0, 0)];
    let d = be.sample_later(&dead, &greedy, &[0, 0]).unwrap();
    let e = be.embed_drawn(&t, &[0, 0], &[(0, 0), (1, 1)], &d).unwrap();
    let got = be.act_to_f32(&e).unwrap();
    assert_eq!(got[..h], table[h..2 * h], "row 0 drew token 1");
    assert!(
        got[h..].iter().all(|v| v.is_nan()),
        "row 1 drew nothing: NaN"
    );
    let err = be.read_drawn(&d).unwrap_err().to_string();
    assert!(err.contains("row 1 has no finite logit"), "{err}");
    assert!(be.sample(&dead, &greedy, &[0, 0]).is_err());
}
