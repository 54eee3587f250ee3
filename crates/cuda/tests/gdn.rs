//! The gated delta rule on CUDA (`headroom_cuda::ops::gdn`) against an f64
//! host implementation of the recurrent rule, on fresh random inputs (the
//! seed is printed), outputs NaN-poisoned before the kernels run. GPU tests
//! are ignored here and run by `bench/gpu/check_gdn.sh`; the validation
//! tests at the end run anywhere (fake device memory).

use half::bf16;
use headroom_cuda::alloc::{Allocator, DeviceBuffer, RawMemory};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::gdn::{
    gated_delta_rule, gated_delta_rule_tuned, validate, GdnLaunch, ScanWidth, Tuning,
};
use headroom_cuda::CudaError;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use rayon::prelude::*;

const TOL: f64 = 2e-2;
/// Every scan width; `Full` runs on sm_90a only (see [`widths`]).
const WIDTHS: [ScanWidth; 3] = [ScanWidth::Narrow, ScanWidth::Wide, ScanWidth::Full];

/// The scan widths that run on `dev`: all three on sm_90a, else the narrow
/// and wide scans (the full-width scan is built for sm_90a alone; a launch
/// elsewhere is refused: launch.rs's `the_full_width_scan_is_refused_off_sm_90a`).
fn widths(dev: &CudaDevice) -> Vec<ScanWidth> {
    WIDTHS
        .into_iter()
        .filter(|&w| w.runs_on(&dev.arch))
        .collect()
}
type Seq = (usize, usize, usize);

#[derive(Clone, Copy)]
struct Dims {
    hk: usize,
    hv: usize,
    dk: usize,
    dv: usize,
}
const SMALL: Dims = Dims {
    hk: 2,
    hv: 4,
    dk: 128,
    dv: 128,
};
const QWEN36_35B: Dims = Dims {
    hk: 16,
    hv: 32,
    dk: 128,
    dv: 128,
};
impl Dims {
    fn row(&self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }
    fn head_state(&self) -> usize {
        self.dk * self.dv
    }
    fn slot_state(&self) -> usize {
        self.hv * self.head_state()
    }
}

fn fresh_seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    eprintln!("seed {s}");
    s
}

/// Host inputs: qkv rounded to bf16 (kept as f32), g, beta, initial state.
struct Inputs {
    d: Dims,
    t: usize,
    qkv: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
}

impl Inputs {
    fn random(d: Dims, t: usize, slots: usize, seed: u64) -> Inputs {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut n = || rng.sample::<f32, _>(StandardNormal);
        let qkv = (0..t * d.row())
            .map(|_| bf16::from_f32(n()).to_f32())
            .collect();
        let state = (0..slots * d.slot_state()).map(|_| 0.5 * n()).collect();
        // Per-head decay rates from long memory (exp(-5)) to fast (exp(1)).
        let a: Vec<f32> = (0..d.hv)
            .map(|h| -5.0 + 6.0 * h as f32 / d.hv.max(2) as f32 - 1.0)
            .collect();
        let softplus = |x: f32| (1.0 + x.exp()).ln();
        let mut g = vec![0.0; t * d.hv];
        let mut beta = vec![0.0; t * d.hv];
        for r in 0..t {
            for h in 0..d.hv {
                g[r * d.hv + h] = -a[h].exp() * softplus(n());
                beta[r * d.hv + h] = 1.0 / (1.0 + (-n()).exp());
            }
        }
        Inputs {
            d,
            t,
            qkv,
            g,
            beta,
            state,
        }
    }
}

/// The recurrent rule in f64 over `seqs`, advancing `state`; returns `out`
/// `[t][hv·dv]` with rows outside every sequence NaN.
fn reference(x: &Inputs, seqs: &[Seq], state: &mut [f64]) -> Vec<f64> {
    let d = x.d;
    let mut out = vec![f64::NAN; x.t * d.hv * d.dv];
    let norm = |v: &[f32], scale: f64| -> Vec<f64> {
        let ss: f64 = v.iter().map(|&a| a as f64 * a as f64).sum();
        let inv = scale / (ss + 1e-6).sqrt();
        v.iter().map(|&a| a as f64 * inv).collect()
    };
    for &(slot, first, rows) in seqs {
        let st = &mut state[slot * d.slot_state()..][..d.slot_state()];
        let heads: Vec<Vec<f64>> = st
            .par_chunks_mut(d.head_state())
            .enumerate()
            .map(|(h, s)| {
                let kh = h / (d.hv / d.hk);
                let mut o = vec![0.0; rows * d.dv];
                for r in 0..rows {
                    let row = &x.qkv[(first + r) * d.row()..][..d.row()];
                    let q = norm(&row[kh * d.dk..][..d.dk], 1.0 / (d.dk as f64).sqrt());
                    let k = norm(&row[(d.hk + kh) * d.dk..][..d.dk], 1.0);
                    let v = &row[2 * d.hk * d.dk + h * d.dv..][..d.dv];
                    let decay = (x.g[(first + r) * d.hv + h] as f64).exp();
                    let b = x.beta[(first + r) * d.hv + h] as f64;
                    s.iter_mut().for_each(|e| *e *= decay);
                    for j in 0..d.dv {
                        let kv: f64 = (0..d.dk).map(|i| s[i * d.dv + j] * k[i]).sum();
                        let delta = (v[j] as f64 - kv) * b;
                        let mut acc = 0.0;
                        for i in 0..d.dk {
                            s[i * d.dv + j] += k[i] * delta;
                            acc += s[i * d.dv + j] * q[i];
                        }
                        o[r * d.dv + j] = acc;
                    }
                }
                o
            })
            .collect();
        for (h, o) in heads.iter().enumerate() {
            for r in 0..rows {
                out[((first + r) * d.hv + h) * d.dv..][..d.dv]
                    .copy_from_slice(&o[r * d.dv..][..d.dv]);
            }
        }
    }
    out
}

fn device() -> CudaDevice {
    CudaDevice::open(0).expect("a CUDA device (this test is run by bench/gpu/check_gdn.sh)")
}

/// The device buffers of one case.
struct OnDevice {
    qkv: DeviceBuffer,
    g: DeviceBuffer,
    beta: DeviceBuffer,
    state: DeviceBuffer,
    out: DeviceBuffer,
}

impl OnDevice {
    fn upload(dev: &CudaDevice, x: &Inputs) -> OnDevice {
        let bits: Vec<u16> = x.qkv.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
        let out = dev.alloc(x.t * x.d.hv * x.d.dv * 2).unwrap();
        dev.fill_bytes(&out, 0xFF).unwrap(); // NaN in bf16
        OnDevice {
            qkv: dev.upload(&bits).unwrap(),
            g: dev.upload(&x.g).unwrap(),
            beta: dev.upload(&x.beta).unwrap(),
            state: dev.upload(&x.state).unwrap(),
            out,
        }
    }
    /// The default path: the scan width chosen by `scan_width_for`.
    fn run(&self, dev: &CudaDevice, d: Dims, seqs: &[Seq]) -> Result<(), CudaError> {
        gated_delta_rule(dev, &self.launch(d, seqs))
    }
    fn launch<'a>(&'a self, d: Dims, seqs: &'a [Seq]) -> GdnLaunch<'a> {
        GdnLaunch {
            qkv: &self.qkv,
            g: &self.g,
            beta: &self.beta,
            state: &self.state,
            out: &self.out,
            seqs,
            k_heads: d.hk,
            v_heads: d.hv,
            k_dim: d.dk,
            v_dim: d.dv,
        }
    }
    fn read(&self, dev: &CudaDevice, x: &Inputs) -> (Vec<f32>, Vec<f32>) {
        let mut bits = vec![0u16; x.t * x.d.hv * x.d.dv];
        dev.read(&self.out, &mut bits).unwrap();
        let mut state = vec![0f32; x.state.len()];
        dev.read(&self.state, &mut state).unwrap();
        let out = bits.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
        (out, state)
    }
}

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        num += (g as f64 - w) * (g as f64 - w);
        den += w * w;
    }
    (num / den.max(1e-30)).sqrt()
}

/// Output rows and state slot of each sequence within `TOL` of the
/// reference; rows outside every sequence still NaN; untouched slots intact.
fn check(x: &Inputs, seqs: &[Seq], out: &[f32], state: &[f32], want_out: &[f64], want: &[f64]) {
    let d = x.d;
    let w = d.hv * d.dv;
    let mut covered = vec![false; x.t];
    for &(slot, first, rows) in seqs {
        let e = rel_err(
            &out[first * w..][..rows * w],
            &want_out[first * w..][..rows * w],
        );
        assert!(
            e <= TOL,
            "slot {slot} rows {first}+{rows}: output rel err {e:.3e}"
        );
        let ss = d.slot_state();
        let es = rel_err(&state[slot * ss..][..ss], &want[slot * ss..][..ss]);
        assert!(
            es <= TOL,
            "slot {slot} rows {first}+{rows}: state rel err {es:.3e}"
        );
        covered[first..first + rows]
            .iter_mut()
            .for_each(|c| *c = true);
        eprintln!("  slot {slot} rows {first}+{rows}: ok (out {e:.2e}, state {es:.2e})");
    }
    for (r, _) in covered.iter().enumerate().filter(|(_, c)| !**c) {
        assert!(
            out[r * w..][..w].iter().all(|v| v.is_nan()),
            "row {r} written"
        );
    }
    let ss = d.slot_state();
    for slot in 0..x.state.len() / ss {
        if seqs.iter().all(|s| s.0 != slot) {
            assert_eq!(
                &state[slot * ss..][..ss],
                &x.state[slot * ss..][..ss],
                "slot {slot}"
            );
        }
    }
}

/// The kernel variants every GPU check runs: the prep with each scan width
/// that runs on this GPU. GDN_CHECK_WIDTHS=full (or narrow, wide, or a comma
/// list) runs those widths only.
fn variants() -> Vec<Tuning> {
    let only = std::env::var("GDN_CHECK_WIDTHS").ok();
    widths(&device())
        .into_iter()
        .filter(|w| {
            only.as_ref().is_none_or(|o| {
                o.split(',')
                    .any(|n| n.trim().eq_ignore_ascii_case(&format!("{w:?}")))
            })
        })
        .map(|w| Tuning {
            width: Some(w),
            ..Tuning::default()
        })
        .collect()
}

/// Runs `calls` (each a list of sequences) in order on the device and the
/// reference, then checks the union; once per kernel variant, fresh inputs each.
fn run_and_check(d: Dims, t: usize, slots: usize, calls: &[Vec<Seq>]) {
    for v in variants() {
        eprintln!(" variant {v:?}");
        run_and_check_with(d, t, slots, calls, v);
    }
}

fn run_and_check_with(d: Dims, t: usize, slots: usize, calls: &[Vec<Seq>], v: Tuning) {
    let dev = device();
    let x = Inputs::random(d, t, slots, fresh_seed());
    let bufs = OnDevice::upload(&dev, &x);
    let mut want: Vec<f64> = x.state.iter().map(|&v| v as f64).collect();
    let mut want_out = vec![f64::NAN; t * d.hv * d.dv];
    for seqs in calls {
        gated_delta_rule_tuned(&dev, &bufs.launch(d, seqs), &v).unwrap();
        let o = reference(&x, seqs, &mut want);
        for (w, o) in want_out.iter_mut().zip(o) {
            if !o.is_nan() {
                *w = o;
            }
        }
    }
    let (out, state) = bufs.read(&dev, &x);
    let all: Vec<Seq> = calls.iter().flatten().copied().collect();
    let mut merged: Vec<Seq> = Vec::new();
    for s in all {
        match merged.iter_mut().find(|m| m.0 == s.0 && m.1 + m.2 == s.1) {
            Some(m) => m.2 += s.2,
            None => merged.push(s),
        }
    }
    check(&x, &merged, &out, &state, &want_out, &want);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn lengths_1_37_64_65_129_192_300_match_the_f64_recurrence() {
    // 1-5 chunks: the three-stage scan's prologue (two chunks in flight) and
    // its empty commit groups past a sequence's end, full and partial tails.
    for len in [1, 37, 64, 65, 129, 192, 300] {
        eprintln!("length {len}");
        run_and_check(SMALL, len + 9, 3, &[vec![(1, 5, len)]]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn varlen_batch_with_slots_gqa_and_initial_state() {
    let seqs = vec![(2, 0, 300), (0, 300, 1), (4, 301, 65), (1, 370, 37)];
    run_and_check(SMALL, 410, 5, std::slice::from_ref(&seqs));
    let gqa4 = Dims { hk: 1, ..SMALL };
    run_and_check(gqa4, 410, 5, &[seqs]);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn decode_batch_runs_every_sequence_in_one_call() {
    let seqs: Vec<Seq> = (0..6).map(|i| ((i * 5) % 7, i + 1, 1)).collect();
    run_and_check(
        SMALL,
        8,
        7,
        &[
            seqs.clone(),
            seqs.iter().map(|s| (s.0, s.1 + 1, 1)).collect(),
        ],
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn chunk_split_300_as_64_37_199_carries_the_state() {
    // One call, then three calls over the same rows on a fresh copy.
    run_and_check(SMALL, 300, 2, &[vec![(1, 0, 300)]]);
    run_and_check(
        SMALL,
        300,
        2,
        &[vec![(1, 0, 64)], vec![(1, 64, 37)], vec![(1, 101, 199)]],
    );
    // And the two on identical inputs agree with each other: the one call at
    // each width but the narrow one, the three calls narrow (the widths agree
    // too).
    let dev = device();
    let x = Inputs::random(SMALL, 300, 2, fresh_seed());
    let narrow = Tuning {
        width: Some(ScanWidth::Narrow),
        ..Tuning::default()
    };
    for v in variants()
        .into_iter()
        .filter(|v| v.width != Some(ScanWidth::Narrow))
    {
        let one = OnDevice::upload(&dev, &x);
        gated_delta_rule_tuned(&dev, &one.launch(SMALL, &[(1, 0, 300)]), &v).unwrap();
        let three = OnDevice::upload(&dev, &x);
        for s in [(1, 0, 64), (1, 64, 37), (1, 101, 199)] {
            gated_delta_rule_tuned(&dev, &three.launch(SMALL, &[s]), &narrow).unwrap();
        }
        let (o1, s1) = one.read(&dev, &x);
        let (o3, s3) = three.read(&dev, &x);
        let (e_out, e_state) = (rel_err(&o3, &f64s(&o1)), rel_err(&s3, &f64s(&s1)));
        eprintln!(
            "{:?} one call vs narrow split: out {e_out:.3e} state {e_state:.3e}",
            v.width
        );
        assert!(e_out <= TOL && e_state <= TOL);
    }
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&a| a as f64).collect()
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn every_width_matches_the_others_on_35b_dims() {
    // The 35B-A3B shape, one call of eight sequences of different lengths
    // whose tails are not multiples of 64 (tails 44, 1, 37, 58, 1, 63, 2,
    // 36; a 2-row sequence: one chunk of mostly padding), slots permuted
    // with an initial state in each and two slots untouched. Each width
    // within TOL of the f64 reference and of the narrow scan (same prep,
    // same algebra and rounding points: their difference is summation order
    // only), and two runs of each bitwise equal (no atomics: a difference
    // means a race).
    let d = QWEN36_35B;
    let lens = [300usize, 129, 37, 250, 65, 191, 2, 100];
    let slots = [3usize, 0, 7, 1, 9, 4, 6, 2];
    let mut seqs: Vec<Seq> = Vec::new();
    let mut first = 0;
    for (&rows, &slot) in lens.iter().zip(&slots) {
        seqs.push((slot, first, rows));
        first += rows;
    }
    let t = first + 5;
    let dev = device();
    let x = Inputs::random(d, t, 10, fresh_seed());
    let mut want: Vec<f64> = x.state.iter().map(|&v| v as f64).collect();
    let want_out = reference(&x, &seqs, &mut want);
    let run = |w: ScanWidth| {
        eprintln!(" {w:?}");
        let bufs = OnDevice::upload(&dev, &x);
        let v = Tuning {
            width: Some(w),
            ..Tuning::default()
        };
        gated_delta_rule_tuned(&dev, &bufs.launch(d, &seqs), &v).unwrap();
        let (out, state) = bufs.read(&dev, &x);
        check(&x, &seqs, &out, &state, &want_out, &want);
        (out, state)
    };
    let same_bits = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    };
    let (on, sn) = run(ScanWidth::Narrow);
    let rw = d.hv * d.dv;
    let ss = d.slot_state();
    for w in widths(&dev) {
        let (o, s) = run(w);
        let (o2, s2) = run(w);
        assert!(
            same_bits(&o, &o2) && same_bits(&s, &s2),
            "{w:?}: two runs on identical inputs differ (a race?)"
        );
        if w == ScanWidth::Narrow {
            continue;
        }
        for &(slot, first, rows) in &seqs {
            let want_o = &f64s(&on[first * rw..][..rows * rw]);
            let e = rel_err(&o[first * rw..][..rows * rw], want_o);
            let es = rel_err(&s[slot * ss..][..ss], &f64s(&sn[slot * ss..][..ss]));
            eprintln!(
                "  {w:?} vs narrow, slot {slot} rows {first}+{rows}: out {e:.2e} state {es:.2e}"
            );
            assert!(
                e <= TOL && es <= TOL,
                "{w:?} vs narrow, slot {slot} rows {first}+{rows}: out {e:.3e} state {es:.3e}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn qwen36_35b_dims_at_2048_rows() {
    run_and_check(QWEN36_35B, 2048, 2, &[vec![(1, 0, 2048)]]);
}

/// FNV-1a over the bits of `words`.
fn fnv(words: &[f32]) -> u64 {
    words.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, w| {
        (h ^ w.to_bits() as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn fixed_inputs_give_the_same_bits_run_after_run() {
    // The 35B-A3B shape at fixed inputs (seed 31): W1's eight 1,024-row
    // prompts (the full-width scan on sm_90a) and one 2,048-row prompt (the
    // narrow scan), each twice: the runs bitwise equal, every output finite,
    // and a fingerprint of outputs and states printed (`gdn_fingerprint`),
    // which a change meant to keep the kernels' bits compares across
    // binaries (docs/perf/cuda-gdn.md, session 31).
    let dev = device();
    let d = QWEN36_35B;
    for (name, n, len) in [("8x1024", 8usize, 1024usize), ("1x2048", 1, 2048)] {
        let x = Inputs::random(d, n * len, n, 31);
        let seqs: Vec<Seq> = (0..n).map(|i| (i, i * len, len)).collect();
        let mut prints = Vec::new();
        for _ in 0..2 {
            let bufs = OnDevice::upload(&dev, &x);
            bufs.run(&dev, d, &seqs).unwrap();
            let (out, state) = bufs.read(&dev, &x);
            assert!(
                out.iter().chain(&state).all(|v| v.is_finite()),
                "{name}: a non-finite output"
            );
            prints.push((fnv(&out), fnv(&state)));
        }
        assert_eq!(prints[0], prints[1], "{name}: two runs differ (a race?)");
        println!(
            "gdn_fingerprint {name}: out {:016x} state {:016x}",
            prints[0].0, prints[0].1
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh"]
fn nan_in_one_row_stays_in_its_sequence() {
    for v in variants() {
        nan_row_case(v);
    }
}

fn nan_row_case(v: Tuning) {
    let dev = device();
    let d = SMALL;
    let mut x = Inputs::random(d, 200, 2, fresh_seed());
    // A NaN in the keys of row 50 (sequence 0, every key head): every later
    // output row of that sequence and its state become NaN; sequence 1 is untouched.
    for kh in 0..d.hk {
        x.qkv[50 * d.row() + (d.hk + kh) * d.dk + 3] = f32::NAN;
    }
    let seqs = [(0, 0, 100), (1, 100, 100)];
    let bufs = OnDevice::upload(&dev, &x);
    gated_delta_rule_tuned(&dev, &bufs.launch(d, &seqs), &v).unwrap();
    let (out, state) = bufs.read(&dev, &x);
    let mut want: Vec<f64> = x.state.iter().map(|&v| v as f64).collect();
    let want_out = reference(&x, &seqs[1..], &mut want);
    let w = d.hv * d.dv;
    assert!(
        out[50 * w..100 * w].iter().all(|v| v.is_nan()),
        "rows 50.. of sequence 0"
    );
    let ss = d.slot_state();
    assert!(state[..ss].iter().all(|v| v.is_nan()), "state of slot 0");
    assert!(
        out[100 * w..].iter().all(|v| v.is_finite()),
        "sequence 1 finite"
    );
    let e = rel_err(&out[100 * w..], &want_out[100 * w..]);
    let es = rel_err(&state[ss..], &want[ss..]);
    assert!(
        e <= TOL && es <= TOL,
        "sequence 1: out {e:.3e} state {es:.3e}"
    );
}

// The timing bench (`bench::bench_qwen36_35b_prefill_ms_per_layer`).
#[path = "gdn/bench.rs"]
mod bench;

// The launch validation on fake device memory (no GPU).
#[path = "gdn/validate.rs"]
mod validate;
