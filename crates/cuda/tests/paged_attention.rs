//! Attention over the paged KV block pool on the GPU, against an f64
//! reference on fresh random inputs, outputs NaN-poisoned before the kernels
//! write them: the one-launch paged kernel (`attention::paged_raw_with`) over
//! shuffled, non-contiguous block tables with unused pool rows NaN, mixed
//! batches (decode rows, a chunk with history, a fresh prompt), GQA 8 and 1,
//! head dims 64/128/256, bf16 and f16, tails, forced key splits and both split combines, the output
//! gate, NaN in one sequence's keys; and the backend's ops (kv_write through
//! the tables, attention on both routes, the identity layout equal to a
//! paged one bit for bit). GPU tests, ignored here; run with
//! `cargo test --release -p headroom-cuda --test paged_attention -- --ignored`.

use half::{bf16, f16};
use headroom_core::ops::{Backend, Batch, BlockTables, KvSpec};
use headroom_core::{Dtype, RouteRequest};
use headroom_cuda::attention::{
    combine_form, paged_raw_with, CombineForm, PagedBuffers, PagedOptions, PagedRun, PagedShape,
};
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaKvCache};
use headroom_cuda::device::CudaDevice;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

mod support;
use support::rel_err;

#[path = "paged_attention/pairs.rs"]
mod pairs;

const ROWS: usize = 64;

fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

fn round(dtype: Dtype, x: f32) -> f32 {
    match dtype {
        Dtype::F16 => f16::from_f32(x).to_f32(),
        _ => bf16::from_f32(x).to_f32(),
    }
}

fn bits(dtype: Dtype, x: f32) -> u16 {
    match dtype {
        Dtype::F16 => f16::from_f32(x).to_bits(),
        _ => bf16::from_f32(x).to_bits(),
    }
}

fn from_bits(dtype: Dtype, b: u16) -> f32 {
    match dtype {
        Dtype::F16 => f16::from_bits(b).to_f32(),
        _ => bf16::from_bits(b).to_f32(),
    }
}

/// `n` values uniform in `[-1, 1)`, rounded to `dtype`.
fn uniform(dtype: Dtype, seed: u64, n: usize) -> Vec<f32> {
    let mut g = rng(seed);
    (0..n)
        .map(|_| round(dtype, g.random::<f32>() * 2.0 - 1.0))
        .collect()
}

/// A batch for the raw kernel: per sequence (query rows, keys held).
struct Case {
    seqs: Vec<(usize, usize)>,
    q_heads: usize,
    kv_heads: usize,
    d: usize,
}

/// Host data of a case: token-major q (and gate), each sequence's K and V
/// `[kv_len][kv_heads][d]`, shuffled tables and the pool with every row
/// that no sequence holds set to NaN.
struct Host {
    cu: Vec<usize>,
    kv_lens: Vec<usize>,
    q: Vec<f32>,
    gate: Vec<f32>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    tables: BlockTables,
    blocks: usize,
}

impl Case {
    fn host(&self, dtype: Dtype, seed: u64) -> Host {
        let (nq, nkv, d) = (self.q_heads, self.kv_heads, self.d);
        let mut cu = vec![0];
        for &(t, _) in &self.seqs {
            cu.push(cu.last().unwrap() + t);
        }
        let rows = *cu.last().unwrap();
        let kv_lens: Vec<usize> = self.seqs.iter().map(|s| s.1).collect();
        let need: usize = kv_lens.iter().map(|&l| l.div_ceil(ROWS)).sum();
        let blocks = need + 5; // some blocks no sequence holds
        let mut ids: Vec<u32> = (0..blocks as u32).collect();
        ids.shuffle(&mut rng(seed ^ 0x5eed));
        let mut at = 0;
        let tables: Vec<Vec<u32>> = kv_lens
            .iter()
            .map(|&l| {
                let t = ids[at..at + l.div_ceil(ROWS)].to_vec();
                at += t.len();
                t
            })
            .collect();
        let k = kv_lens
            .iter()
            .enumerate()
            .map(|(i, &l)| uniform(dtype, seed + 10 + i as u64, l * nkv * d))
            .collect();
        let v = kv_lens
            .iter()
            .enumerate()
            .map(|(i, &l)| uniform(dtype, seed + 500 + i as u64, l * nkv * d))
            .collect();
        Host {
            cu,
            kv_lens,
            q: uniform(dtype, seed + 1, rows * nq * d),
            gate: uniform(dtype, seed + 2, rows * nq * d)
                .iter()
                .map(|x| round(dtype, 3.0 * x))
                .collect(),
            k,
            v,
            tables: BlockTables::from_tables(&tables),
            blocks,
        }
    }
}

impl Host {
    /// The pool `[blocks][kv_heads][64][d]` of K (or V), NaN where unheld.
    fn pool(&self, dtype: Dtype, kv_heads: usize, d: usize, of: &[Vec<f32>]) -> Vec<u16> {
        let mut pool = vec![bits(dtype, f32::NAN); self.blocks * kv_heads * ROWS * d];
        for (i, x) in of.iter().enumerate() {
            let table = self.tables.table(i);
            for p in 0..self.kv_lens[i] {
                for h in 0..kv_heads {
                    let dst = ((table[p / ROWS] as usize * kv_heads + h) * ROWS + p % ROWS) * d;
                    let src = (p * kv_heads + h) * d;
                    for e in 0..d {
                        pool[dst + e] = bits(dtype, x[src + e]);
                    }
                }
            }
        }
        pool
    }

    /// The f64 reference, token-major like q (gated when asked).
    fn reference(&self, c: &Case, gated: bool) -> Vec<f64> {
        let (nq, nkv, d) = (c.q_heads, c.kv_heads, c.d);
        let group = nq / nkv;
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = vec![0f64; self.q.len()];
        for i in 0..self.kv_lens.len() {
            let t = self.cu[i + 1] - self.cu[i];
            let hist = self.kv_lens[i] - t;
            for r in 0..t {
                let row = self.cu[i] + r;
                for hh in 0..nq {
                    let h = hh / group;
                    let qv = &self.q[(row * nq + hh) * d..][..d];
                    let keys = hist + r + 1;
                    let s: Vec<f64> = (0..keys)
                        .map(|p| {
                            let kv = &self.k[i][(p * nkv + h) * d..][..d];
                            qv.iter()
                                .zip(kv)
                                .map(|(a, b)| *a as f64 * *b as f64)
                                .sum::<f64>()
                                * scale
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let z: f64 = w.iter().sum();
                    let o = &mut out[(row * nq + hh) * d..][..d];
                    for (p, wp) in w.iter().enumerate() {
                        let vv = &self.v[i][(p * nkv + h) * d..][..d];
                        for e in 0..d {
                            o[e] += wp / z * vv[e] as f64;
                        }
                    }
                    if gated {
                        for (e, oe) in o.iter_mut().enumerate() {
                            let g = self.gate[(row * nq + hh) * d + e] as f64;
                            *oe /= 1.0 + (-g).exp();
                        }
                    }
                }
            }
        }
        out
    }
}

/// Runs the raw paged kernel on a case, the splits and the combine forced
/// where given; returns the output, the splits and the combine that ran.
fn run_raw(
    dev: &CudaDevice,
    dtype: Dtype,
    c: &Case,
    h: &Host,
    gated: bool,
    splits: Option<usize>,
    combine: Option<CombineForm>,
) -> (Vec<f32>, usize, Option<CombineForm>) {
    let opts = PagedOptions {
        splits,
        combine,
        ..PagedOptions::default()
    };
    let (out, run) = run_opts(dev, dtype, c, h, gated, opts);
    (out, run.splits, run.combine)
}

/// Runs the raw paged kernel on a case with `opts`: the output (NaN-poisoned
/// before the launch) and what ran.
fn run_opts(
    dev: &CudaDevice,
    dtype: Dtype,
    c: &Case,
    h: &Host,
    gated: bool,
    opts: PagedOptions,
) -> (Vec<f32>, PagedRun) {
    let up = |x: &[f32]| {
        let b: Vec<u16> = x.iter().map(|&v| bits(dtype, v)).collect();
        dev.upload(&b).unwrap()
    };
    let q = up(&h.q);
    let gate = up(&h.gate);
    let kp = dev.upload(&h.pool(dtype, c.kv_heads, c.d, &h.k)).unwrap();
    let vp = dev.upload(&h.pool(dtype, c.kv_heads, c.d, &h.v)).unwrap();
    let out = dev.alloc(h.q.len() * 2).unwrap();
    dev.fill_bytes(&out, 0xFF).unwrap();
    let shape = PagedShape {
        cu_seqlens: &h.cu,
        kv_lens: &h.kv_lens,
        tables: &h.tables,
        q_heads: c.q_heads,
        kv_heads: c.kv_heads,
        head_dim: c.d,
    };
    let bufs = PagedBuffers {
        q: q.ptr(),
        k: kp.ptr(),
        v: vp.ptr(),
        out: out.ptr(),
        gate: gated.then(|| gate.ptr()),
    };
    // SAFETY: q, out and the gate hold rows × q_heads × d elements; the pools
    // hold every block of the tables.
    let run = unsafe { paged_raw_with(dev, dtype, &shape, &bufs, opts) }.unwrap();
    let mut raw = vec![0u16; h.q.len()];
    dev.read(&out, &mut raw).unwrap();
    (raw.iter().map(|&b| from_bits(dtype, b)).collect(), run)
}

fn check_per_sequence(c: &Case, h: &Host, got: &[f32], want: &[f64], what: &str) {
    let w = c.q_heads * c.d;
    for i in 0..h.kv_lens.len() {
        let r = h.cu[i] * w..h.cu[i + 1] * w;
        let e = rel_err(&got[r.clone()], &want[r]);
        assert!(e < 1.5e-2, "{what} sequence {i}: rel err {e}");
    }
}

/// Decode rows over short and long history, a chunk with history whose rows
/// and keys are not multiples of 64, a fresh prompt of more than a tile.
fn mixed(q_heads: usize, kv_heads: usize, d: usize) -> Case {
    Case {
        seqs: vec![(1, 300), (1, 1090), (100, 1100), (130, 130), (1, 1)],
        q_heads,
        kv_heads,
        d,
    }
}

fn device() -> CudaDevice {
    let dev = CudaDevice::open(0).expect("a CUDA device");
    assert_eq!(dev.arch, "sm_90a", "the paged kernel is Hopper's");
    dev
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn mixed_batches_match_f64_for_every_head_dim_dtype_and_group() {
    let dev = device();
    each_dtype_and_head_dim(|dtype, d| {
        for (nq, nkv) in [(16, 2), (4, 4)] {
            let c = mixed(nq, nkv, d);
            let h = c.host(dtype, 7 + d as u64 + nq as u64);
            let (got, ..) = run_raw(&dev, dtype, &c, &h, false, None, None);
            let want = h.reference(&c, false);
            check_per_sequence(&c, &h, &got, &want, &format!("{dtype:?} d{d} {nq}/{nkv}"));
        }
    });
}

/// `f` for bf16 and f16 at every head dim the paged kernel takes.
fn each_dtype_and_head_dim(mut f: impl FnMut(Dtype, usize)) {
    for dtype in [Dtype::Bf16, Dtype::F16] {
        for d in [64, 128, 256] {
            f(dtype, d);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn forced_splits_and_the_gate_match_f64() {
    let dev = device();
    for dtype in [Dtype::Bf16, Dtype::F16] {
        let c = mixed(16, 2, 256);
        let h = c.host(dtype, 99);
        for gated in [false, true] {
            let want = h.reference(&c, gated);
            for splits in [None, Some(2), Some(5), Some(64)] {
                let (got, ran, _) = run_raw(&dev, dtype, &c, &h, gated, splits, None);
                if let Some(s) = splits {
                    assert_eq!(ran, s, "the forced splits ran");
                }
                let what = format!("{dtype:?} gated {gated} splits {ran}");
                check_per_sequence(&c, &h, &got, &want, &what);
            }
        }
    }
    // A lone decode row over long history splits by itself.
    let c = Case {
        seqs: vec![(1, 5000)],
        q_heads: 16,
        kv_heads: 2,
        d: 128,
    };
    let h = c.host(Dtype::Bf16, 5);
    let (got, ran, _) = run_raw(&dev, Dtype::Bf16, &c, &h, true, None, None);
    assert!(ran > 1, "one decode row over 5,000 keys splits ({ran})");
    check_per_sequence(&c, &h, &got, &h.reference(&c, true), "lone decode");
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn both_split_combines_match_f64_for_every_head_dim_dtype_and_gate() {
    // The rows combine (a warp per output row) and the quads combine (a CTA per
    // row and 64 columns), each forced over few and many splits; empty splits
    // (the short sequences' keys end before the last splits) weigh nothing.
    let dev = device();
    each_dtype_and_head_dim(|dtype, d| {
        let c = mixed(16, 2, d);
        let h = c.host(dtype, 31 + d as u64);
        for gated in [false, true] {
            let want = h.reference(&c, gated);
            for splits in [3, 8, 13] {
                for form in [CombineForm::Rows, CombineForm::Quads] {
                    let (got, ran, combined) =
                        run_raw(&dev, dtype, &c, &h, gated, Some(splits), Some(form));
                    assert_eq!((ran, combined), (splits, Some(form)));
                    let what = format!("{dtype:?} d{d} gated {gated} splits {ran} {form:?}");
                    check_per_sequence(&c, &h, &got, &want, &what);
                }
            }
            // Unforced, the plan's combine runs.
            let (_, ran, combined) = run_raw(&dev, dtype, &c, &h, gated, Some(5), None);
            assert_eq!((ran, combined), (5, Some(combine_form(5))));
        }
    });
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn nan_in_one_sequences_keys_stays_in_that_sequence() {
    let dev = device();
    let c = mixed(16, 2, 128);
    let mut h = c.host(Dtype::Bf16, 3);
    // Key 5 of sequence 0 (a decode row over 300), KV head 0.
    h.k[0][5 * 2 * 128] = f32::NAN;
    // Unsplit, split in 4 (the rows combine) and in 12 (the quads combine).
    for splits in [Some(1), Some(4), Some(12)] {
        let (got, ..) = run_raw(&dev, Dtype::Bf16, &c, &h, false, splits, None);
        let w = 16 * 128;
        // Sequence 0's query heads of KV head 0 are NaN, those of KV head 1 are not.
        assert!(got[..8 * 128].iter().all(|x| x.is_nan()), "{splits:?}");
        assert!(got[8 * 128..w].iter().all(|x| x.is_finite()), "{splits:?}");
        let want = h.reference(&c, false);
        for i in 1..h.kv_lens.len() {
            let r = h.cu[i] * w..h.cu[i + 1] * w;
            let e = rel_err(&got[r.clone()], &want[r]);
            assert!(e < 1.5e-2, "sequence {i} after a NaN key elsewhere: {e}");
        }
    }
}

// ---- through the backend ---------------------------------------------------

fn act(be: &CudaBackend, rows: usize, cols: usize, data: &[f32]) -> CudaAct {
    be.act_from_f32(rows, cols, data).unwrap()
}

/// Writes the same random K/V rows of `batch` into every cache.
fn write_all(
    be: &CudaBackend,
    caches: &mut [&mut CudaKvCache],
    batches: &[Batch],
    w: usize,
    seed: u64,
) {
    for (cache, batch) in caches.iter_mut().zip(batches) {
        let n = batch.rows() * w;
        let (k, v) = (
            uniform(Dtype::Bf16, seed, n),
            uniform(Dtype::Bf16, seed + 1, n),
        );
        be.kv_write(
            cache,
            &act(be, batch.rows(), w, &k),
            &act(be, batch.rows(), w, &v),
            batch,
        )
        .unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn the_identity_layout_and_a_shuffled_pool_give_the_same_bits_on_both_routes() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    let (nq, nkv, d) = (16, 2, 256);
    let w = nkv * d;
    let ident = KvSpec::contiguous(4, nkv, d, 1200);
    let paged = KvSpec {
        blocks: 3 * ident.blocks, // a larger pool than the identity layout needs
        ..ident
    };
    let mut a = be.new_kv_cache(&ident).unwrap();
    // The paged pool comes from NaN-poisoned memory: rows no table names (and
    // rows past each sequence's length) must never reach an output.
    let dev = be.device();
    let pool_bytes = paged.blocks * nkv * ROWS * d * 2;
    let poison: Vec<_> = (0..2).map(|_| dev.alloc(pool_bytes).unwrap()).collect();
    for p in &poison {
        dev.fill_bytes(p, 0xFF).unwrap();
    }
    drop(poison);
    let mut b = be.new_kv_cache(&paged).unwrap();
    let mut ids: Vec<u32> = (0..paged.blocks as u32).collect();
    ids.shuffle(&mut rng(11));
    let per = 1200usize.div_ceil(ROWS);
    let tables: Vec<Vec<u32>> = (0..4)
        .map(|s| ids[s * per..(s + 1) * per].to_vec())
        .collect();
    // Each step's tables list the sequences' blocks in batch order.
    let tabled = |batch: Batch| {
        let t: Vec<Vec<u32>> = batch.slots.iter().map(|&s| tables[s].clone()).collect();
        batch.with_blocks(BlockTables::from_tables(&t))
    };
    let prompt = Batch::packed(&[(0, 0, 1000), (1, 0, 70), (2, 0, 5), (3, 0, 300)]);
    write_all(
        &be,
        &mut [&mut a, &mut b],
        &[prompt.clone(), tabled(prompt)],
        w,
        20,
    );
    let step = Batch::packed(&[(0, 1000, 1), (1, 70, 100), (2, 5, 1), (3, 300, 64)]);
    write_all(
        &be,
        &mut [&mut a, &mut b],
        &[step.clone(), tabled(step.clone())],
        w,
        30,
    );
    let q = uniform(Dtype::Bf16, 40, step.rows() * nq * d);
    let gate = uniform(Dtype::Bf16, 41, step.rows() * nq * d);
    let (qa, ga) = (
        act(&be, step.rows(), nq * d, &q),
        act(&be, step.rows(), nq * d, &gate),
    );
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 64 },
    ] {
        let (ya, _) = be.attention_gated(&qa, &a, &step, route, &ga).unwrap();
        let (yb, rb) = be
            .attention_gated(&qa, &b, &tabled(step.clone()), route, &ga)
            .unwrap();
        let (ya, yb) = (be.act_to_f32(&ya).unwrap(), be.act_to_f32(&yb).unwrap());
        assert!(ya.iter().all(|x| x.is_finite()), "{route:?}");
        assert!(
            ya.iter().zip(&yb).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{route:?} ({:?}): identity and paged layouts differ",
            rb.route
        );
    }
    // Fused and composed agree to bf16 rounding, and forced splits to the plan's.
    let (yf, _) = be
        .attention_gated(&qa, &b, &tabled(step.clone()), RouteRequest::Fused, &ga)
        .unwrap();
    let (yc, _) = be
        .attention_gated(
            &qa,
            &b,
            &tabled(step.clone()),
            RouteRequest::Composed { query_block: 0 },
            &ga,
        )
        .unwrap();
    let (ys, run) = be
        .attention_paged_splits(&qa, &b, &tabled(step.clone()), Some(&ga), 6)
        .unwrap();
    assert_eq!(run.splits, 6);
    let yf = be.act_to_f32(&yf).unwrap();
    for other in [be.act_to_f32(&yc).unwrap(), be.act_to_f32(&ys).unwrap()] {
        let want: Vec<f64> = yf.iter().map(|&x| x as f64).collect();
        let e = rel_err(&other, &want);
        assert!(e < 1.5e-2, "routes disagree: {e}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a)"]
fn a_decode_step_of_many_sequences_costs_the_host_one_launch_not_a_loop() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    assert_eq!(be.device().arch, "sm_90a");
    let (nq, nkv, d) = (16, 2, 256);
    let ctx = 1024;
    for n in [1usize, 64, 256] {
        let spec = KvSpec::contiguous(n, nkv, d, ctx + 8);
        let mut cache = be.new_kv_cache(&spec).unwrap();
        let seqs: Vec<(usize, usize, usize)> = (0..n).map(|s| (s, 0, ctx)).collect();
        write_all(&be, &mut [&mut cache], &[Batch::packed(&seqs)], nkv * d, 1);
        let step = Batch::packed(&(0..n).map(|s| (s, ctx, 1)).collect::<Vec<_>>());
        write_all(
            &be,
            &mut [&mut cache],
            std::slice::from_ref(&step),
            nkv * d,
            3,
        );
        let q = act(&be, n, nq * d, &uniform(Dtype::Bf16, 5, n * nq * d));
        let g = act(&be, n, nq * d, &uniform(Dtype::Bf16, 6, n * nq * d));
        let call = || {
            be.attention_gated(&q, &cache, &step, RouteRequest::Fused, &g)
                .unwrap()
        };
        drop(call()); // first use: kernel load
        be.device().synchronize().unwrap();
        let reps = 50;
        let t0 = std::time::Instant::now();
        let outs: Vec<_> = (0..reps).map(|_| call()).collect();
        let host = t0.elapsed().as_secs_f64() / reps as f64;
        be.device().synchronize().unwrap();
        let all = t0.elapsed().as_secs_f64() / reps as f64;
        drop(outs);
        eprintln!(
            "{n} decode sequences × {ctx} keys: host {:.1} µs a call ({:.2} µs a sequence), \
             with the device {:.1} µs a call",
            host * 1e6,
            host * 1e6 / n as f64,
            all * 1e6
        );
        // The old host loop cost ~14.5 µs per sequence per layer: 3.7 ms at 256.
        assert!(host < 1e-3, "{n} sequences: {host} s of host time a call");
    }
}
