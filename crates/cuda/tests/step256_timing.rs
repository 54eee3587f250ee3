//! The ops of one 256-row engine step over a 32k history (issue #25's
//! follow-up turn), timed on the GPU with CUDA events (median of the
//! samples, device time): the paged attention of 256 query rows after 32,768
//! keys (16 q / 2 kv heads, d 256, gated) with each split combine and a sweep
//! of the split count; decode attention of 1 row × 64 / 256 sequences (no
//! regression) and of one sequence by split count at 2k / 8k / 32k keys;
//! the routed MoE's routing and shared combine stages at 256 and 8,192 rows
//! (35B-A3B shape: 2048 → 256 experts, top-8); the GDN conv (8,192
//! channels) at 256 / 8,192 rows. Inputs are
//! device-filled constants or seeded random logits: the figures are speed
//! only (the correctness tests are `paged_attention.rs` and `moe.rs`).
//! Each timing asserts its own run was what it claims (splits, combine); the
//! conv is also timed against its 32-row strips in the same process, kernels
//! queued behind a long memset so no host gap is timed, and the outputs
//! compared (the same bits). (The routing's baseline, the pre-step256
//! shared-memory kernels, was deleted after session 6's call S1 timed it:
//! docs/perf/serving.md.)
//! GPU only, ignored here; run with
//! `cargo test --release -p headroom-cuda --test step256_timing -- --ignored --nocapture`.

use headroom_core::ops::{Backend, Batch, GdnSpec};
use headroom_core::Dtype;
use headroom_core::Tensor;
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::attention::{combine_form, paged_raw_with, CombineForm, PagedOptions, PagedRun};
use headroom_cuda::backend::CudaBackend;
use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::conv::{conv8_strip, CONV8_STRIP, THREADS as CONV_THREADS};

/// The shorter conv strip measured against the kernel's 32 rows.
const CONV_CANDIDATE_STRIP: usize = 8;
use headroom_cuda::event::StreamEvent as Event;
use headroom_cuda::ops::moe::{routed_experts_shared_marked, MoeLaunch, MoeStage, SharedEpilogue};
use rand::{Rng, SeedableRng};
use std::ffi::c_void;

const SAMPLES: usize = 9;
#[path = "support/paged_batch.rs"]
mod paged_batch;
use paged_batch::{filled, median, PagedBatch as Paged, KV_ROWS};

fn device() -> CudaDevice {
    let dev = CudaDevice::open(0).expect("a CUDA device");
    assert_eq!(dev.arch, "sm_90a", "the paged kernel is Hopper's");
    dev
}

impl Paged {
    /// `seqs` sequences of `q_len` new rows after `history` keys.
    fn uniform(dev: &CudaDevice, seqs: usize, q_len: usize, history: usize) -> Paged {
        Paged::new(dev, &vec![(q_len, history + q_len); seqs])
    }

    /// One call (gated) with `splits` / `combine` forced where given.
    fn run(
        &self,
        dev: &CudaDevice,
        splits: Option<usize>,
        combine: Option<CombineForm>,
    ) -> PagedRun {
        let (shape, bufs) = (self.shape(), self.buffers());
        // SAFETY: q, gate and out hold rows × 16 × 256 elements; the pools
        // hold every block of the tables.
        let opts = PagedOptions {
            splits,
            combine,
            ..PagedOptions::default()
        };
        unsafe { paged_raw_with(dev, Dtype::Bf16, &shape, &bufs, opts) }.unwrap()
    }

    /// Median microseconds of a call (after a warm-up) and what it ran.
    fn time(
        &self,
        dev: &CudaDevice,
        splits: Option<usize>,
        combine: Option<CombineForm>,
    ) -> (f64, PagedRun) {
        let run = self.run(dev, splits, combine);
        let us = (0..SAMPLES)
            .map(|_| {
                let a = Event::record(dev).unwrap();
                self.run(dev, splits, combine);
                let b = Event::record(dev).unwrap();
                b.ms_since(&a).unwrap() * 1e3
            })
            .collect();
        (median(us), run)
    }
}

fn form(run: &PagedRun) -> String {
    run.combine
        .map_or("none".into(), |c| format!("{c:?}").to_lowercase())
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_the_follow_up_attention_by_split_count_and_combine() {
    let dev = device();
    let p = Paged::uniform(&dev, 1, 256, 32_768);
    println!(
        "## attention: 256 rows after 32,768 keys, 16/2 heads, d 256, gated (x10 layers a step)"
    );
    println!("| splits | combine | us (attention + combine) |");
    println!("|---:|---|---:|");
    let (auto_us, auto) = p.time(&dev, None, None);
    assert_eq!(auto.combine, Some(combine_form(auto.splits)));
    println!(
        "| {} (plan) | {} (plan) | {auto_us:.1} |",
        auto.splits,
        form(&auto)
    );
    let (old_us, old) = p.time(&dev, None, Some(CombineForm::Quads));
    assert_eq!(
        (old.splits, old.combine),
        (auto.splits, Some(CombineForm::Quads))
    );
    println!("| {} (plan) | quads (before) | {old_us:.1} |", old.splits);
    for s in [1, 2, 3, 4, 6, 8, 16] {
        for c in [CombineForm::Rows, CombineForm::Quads] {
            if s == 1 && c == CombineForm::Quads {
                continue;
            }
            let (us, run) = p.time(&dev, Some(s), Some(c));
            assert_eq!(run.splits, s);
            println!("| {s} | {} | {us:.1} |", form(&run));
        }
    }
    println!(
        "follow-up attention: plan {auto_us:.1} us vs before (quads combine) {old_us:.1} us: {:.1} us a layer, {:.2} ms a step",
        old_us - auto_us,
        (old_us - auto_us) * 10.0 / 1e3
    );
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_decode_attention_of_many_sequences() {
    let dev = device();
    println!("## decode attention: 1 row a sequence, 16/2 heads, d 256, gated");
    println!("| sequences | history | splits | combine (plan) | us | us (the other combine) |");
    println!("|---:|---:|---:|---|---:|---:|");
    // 1, 8, 16, 32, 64 sequences over 32k: 128, 16, 8, 4, 2 splits (the combine
    // switches to rows at 8); 256 sequences fill the GPU unsplit.
    for (seqs, history) in [
        (1, 32_768),
        (8, 32_768),
        (16, 32_768),
        (32, 32_768),
        (64, 32_768),
        (64, 4096),
        (256, 4096),
        (256, 32_768),
    ] {
        let p = Paged::uniform(&dev, seqs, 1, history);
        let (us, run) = p.time(&dev, None, None);
        // The same launch with the other combine.
        let other = match run.combine {
            Some(c) => {
                let o = match c {
                    CombineForm::Rows => CombineForm::Quads,
                    CombineForm::Quads => CombineForm::Rows,
                };
                let (t, or) = p.time(&dev, None, Some(o));
                assert_eq!((or.splits, or.combine), (run.splits, Some(o)));
                format!("{t:.1} ({})", form(&or))
            }
            None => "-".into(),
        };
        println!(
            "| {seqs} | {history} | {} | {} | {us:.1} | {other} |",
            run.splits,
            form(&run)
        );
    }
}

/// Batch-1 decode attention (one sequence, one query row, 8 q heads per KV
/// head) by split count: the plan's against forced counts, at 2k / 8k / 32k
/// keys, back to back behind a memset (device time). Issue 23 asks for the
/// key tiles in parallel rather than in series: each split reads its tiles
/// one after the other, so more splits of fewer tiles shorten the chain.
#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_batch_one_decode_attention_by_split_count() {
    let dev = device();
    let scratch = dev.alloc(4 << 30).unwrap();
    println!(
        "## batch-1 decode attention by split count (16/2 heads, d 256, gated; x10 layers a step)"
    );
    println!("| history | splits | combine | us |");
    println!("|---:|---:|---|---:|");
    for history in [2048, 8192, 32_768] {
        let p = Paged::uniform(&dev, 1, 1, history);
        let plan = p.run(&dev, None, None);
        let us = per_call_us(&dev, &scratch, || {
            p.run(&dev, None, None);
        });
        println!(
            "| {history} | {} (plan) | {} | {us:.1} |",
            plan.splits,
            form(&plan)
        );
        for s in [4, 8, 16, 32, 64, 128] {
            if s > (history + 1).div_ceil(KV_ROWS) {
                continue; // more splits than key tiles
            }
            let r = p.run(&dev, Some(s), None);
            assert_eq!(r.splits, s);
            let us = per_call_us(&dev, &scratch, || {
                p.run(&dev, Some(s), None);
            });
            println!("| {history} | {s} | {} | {us:.1} |", form(&r));
        }
    }
}

/// The 35B-A3B MoE shape: hidden, experts, top-k, intermediate.
const MOE_H: usize = 2048;
const MOE_E: usize = 256;
const MOE_K: usize = 8;
const MOE_I: usize = 512;

/// Device buffers of a routed-MoE call of the 35B-A3B shape at `tokens` rows:
/// expert weights and x device-filled (the routing comes from the logits),
/// `out` large enough for the f32 output (and so for the bf16 one).
struct Moe35b {
    gate_up: DeviceBuffer,
    down: DeviceBuffer,
    x: DeviceBuffer,
    out: DeviceBuffer,
    logits: DeviceBuffer,
    tokens: usize,
}

impl Moe35b {
    fn new(dev: &CudaDevice, tokens: usize, logits: &[f32]) -> Moe35b {
        assert_eq!(logits.len(), tokens * MOE_E);
        Moe35b {
            gate_up: filled(dev, MOE_E * 2 * MOE_I * MOE_H, 0x3C),
            down: filled(dev, MOE_E * MOE_H * MOE_I, 0x3C),
            x: filled(dev, tokens * MOE_H, 0x3C),
            out: filled(dev, tokens * MOE_H * 2, 0xFF),
            logits: dev.upload(logits).unwrap(),
            tokens,
        }
    }

    fn launch(&self) -> MoeLaunch<'_> {
        MoeLaunch {
            x: &self.x,
            router_logits: &self.logits,
            gate_up: &self.gate_up,
            down: &self.down,
            out: &self.out,
            tokens: self.tokens,
            hidden: MOE_H,
            experts: MOE_E,
            top_k: MOE_K,
            intermediate: MOE_I,
            renormalise: true,
        }
    }
}

/// The routed MoE of the 35B-A3B shape (weights device-filled: the routing
/// comes from the random logits) at `tokens` rows: median us of the routing
/// stage (route with its offsets, scatter), of the shared combine, and of the
/// whole routed block.
fn time_moe(dev: &CudaDevice, tokens: usize) -> (f64, f64, f64) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(tokens as u64);
    let logits: Vec<f32> = (0..tokens * MOE_E)
        .map(|_| rng.random::<f32>() * 4.0 - 2.0)
        .collect();
    let m = Moe35b::new(dev, tokens, &logits);
    let l = m.launch();
    let (shared, shared_gate) = (filled(dev, tokens * MOE_H, 0x3C), filled(dev, MOE_H, 0x3C));
    let s = SharedEpilogue {
        shared_gate: &shared_gate,
        shared: &shared,
        out: &m.out,
        norm: None,
    };
    let (mut route, mut combine, mut block) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..=SAMPLES {
        let mut marks: Vec<(MoeStage, Event)> = Vec::new();
        let start = Event::record(dev).unwrap();
        routed_experts_shared_marked(dev, &l, (0, MOE_E), None, &s, &mut |st| {
            marks.push((st, Event::record(dev)?));
            Ok(())
        })
        .unwrap();
        let end = Event::record(dev).unwrap();
        let at = |st: MoeStage| &marks.iter().find(|(m, _)| *m == st).unwrap().1;
        let us = |a: &Event, b: &Event| b.ms_since(a).unwrap() * 1e3;
        if n > 0 {
            route.push(us(at(MoeStage::Route), at(MoeStage::GateUp)));
            combine.push(us(at(MoeStage::Combine), at(MoeStage::End)));
            block.push(us(&start, &end));
        }
    }
    (median(route), median(combine), median(block))
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_the_moe_routing_and_combine() {
    let dev = device();
    println!("## routed MoE, 35B-A3B shape (2048 -> 256 experts, top-8, shared expert folded in)");
    println!("| rows | route + offsets + scatter us | combine (shared) us | routed block us |");
    println!("|---:|---:|---:|---:|");
    for tokens in [256, 2048, 8192] {
        let (r, c, b) = time_moe(&dev, tokens);
        println!("| {tokens} | {r:.1} | {c:.1} | {b:.1} |");
    }
    println!("before (ncu, docs/perf/data/serving-s4/ncu_256.csv, 256 rows): moe_route 15.56 + moe_offsets 3.11 + moe_scatter 2.84 us; moe_combine_shared 8.54 us");
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_the_gdn_conv() {
    // The 35B-A3B GDN layer's conv: 2·16·128 + 32·128 = 8,192 channels, width 4.
    let be = CudaBackend::open(0).expect("a CUDA device");
    let spec = GdnSpec {
        slots: 1,
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        kernel: 4,
    };
    let c = spec.conv_dim();
    assert_eq!(c, 8192);
    let w = be
        .upload_vector(Tensor::from_f32(vec![c * 4], vec![0.25; c * 4]))
        .unwrap();
    let mut state = be.new_gdn_state(&spec).unwrap();
    println!("## GDN conv1d + SiLU, 8,192 channels (x30 layers a step; before, ncu at 256 rows: 13.81 us)");
    println!("| rows | us (conv + state advance) |");
    println!("|---:|---:|");
    for rows in [256, 8192] {
        let x = be.act_from_f32(rows, c, &vec![0.5; rows * c]).unwrap();
        let batch = Batch::single(0, 32_768, rows);
        be.conv1d_silu(&x, &w, &mut state, &batch).unwrap();
        let dev = be.device();
        let us = (0..SAMPLES)
            .map(|_| {
                let a = Event::record(dev).unwrap();
                be.conv1d_silu(&x, &w, &mut state, &batch).unwrap();
                let b = Event::record(dev).unwrap();
                b.ms_since(&a).unwrap() * 1e3
            })
            .collect();
        println!("| {rows} | {:.1} |", median(us));
    }
}

/// Keeps the GPU busy ≈ 1 ms (a 4 GiB memset) so the launches queued after
/// it run back to back: the events then time the device, not the host.
fn busy(dev: &CudaDevice, scratch: &DeviceBuffer) {
    dev.fill_bytes(scratch, 0).unwrap();
}

/// Median µs per call of `f` over SAMPLES runs of 20 calls queued behind [`busy`].
fn per_call_us(dev: &CudaDevice, scratch: &DeviceBuffer, mut f: impl FnMut()) -> f64 {
    const REPS: usize = 20;
    f();
    let us = (0..SAMPLES)
        .map(|_| {
            busy(dev, scratch);
            let a = Event::record(dev).unwrap();
            for _ in 0..REPS {
                f();
            }
            let b = Event::record(dev).unwrap();
            b.ms_since(&a).unwrap() * 1e3 / REPS as f64
        })
        .collect();
    median(us)
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn the_conv_strips_give_the_same_bits_and_are_timed() {
    // The 35B-A3B GDN conv (8,192 channels, width 4) of one sequence after
    // history (its window from the state), launched directly at each strip.
    let dev = device();
    let scratch = dev.alloc(4 << 30).unwrap();
    let c = 8192usize;
    let cblocks = (c / 8).div_ceil(CONV_THREADS as usize);
    let w: Vec<f32> = (0..c * 4).map(|j| ((j % 7) as f32 - 3.0) * 0.1).collect();
    let w = dev.upload(&w).unwrap();
    let state = filled(&dev, 3 * c, 0x3E);
    let slots = dev.upload(&[0i32]).unwrap();
    let f = dev.function("conv1d_silu_k4x8_f32w").unwrap();
    println!(
        "## GDN conv1d + SiLU alone (8,192 channels), kernels back to back (x30 layers a step)"
    );
    println!("| rows | strip 32 us | host's strip | strip 8 us |");
    println!("|---:|---:|---:|---:|");
    for rows in [256usize, 1024, 8192] {
        let mut rng = rand::rngs::StdRng::seed_from_u64(rows as u64);
        let xs: Vec<u16> = (0..rows * c)
            .map(|_| half::bf16::from_f32(rng.random::<f32>() * 2.0 - 1.0).to_bits())
            .collect();
        let x = dev.upload(&xs).unwrap();
        let cu = dev.upload(&[0i32, rows as i32]).unwrap();
        let launch = |strip: usize, out: &DeviceBuffer| {
            let (mut px, mut pw, mut ps, mut po) = (x.ptr(), w.ptr(), state.ptr(), out.ptr());
            let (mut pc, mut psl) = (cu.ptr(), slots.ptr());
            let (mut n, mut cc, mut r, mut s) = (1i32, c as i32, rows as i32, strip as i32);
            let mut params: [*mut c_void; 10] = [
                &mut px as *mut u64 as *mut c_void,
                &mut pw as *mut u64 as *mut c_void,
                &mut ps as *mut u64 as *mut c_void,
                &mut po as *mut u64 as *mut c_void,
                &mut pc as *mut u64 as *mut c_void,
                &mut psl as *mut u64 as *mut c_void,
                &mut n as *mut i32 as *mut c_void,
                &mut cc as *mut i32 as *mut c_void,
                &mut r as *mut i32 as *mut c_void,
                &mut s as *mut i32 as *mut c_void,
            ];
            let grid = (cblocks as u32, rows.div_ceil(strip) as u32, 1);
            // SAFETY: x / out hold rows × c bf16, w c × 4 f32, the state one
            // slot of 3 × c bf16, cu [0, rows] and slots [0]; the parameters
            // follow the kernel's signature.
            unsafe { dev.launch(f, grid, (CONV_THREADS, 1, 1), 0, &mut params) }.unwrap();
        };
        let host = conv8_strip(rows, cblocks, dev.sm_count);
        let strip = CONV_CANDIDATE_STRIP;
        let (before, after) = (filled(&dev, rows * c, 0xFF), filled(&dev, rows * c, 0xFF));
        launch(CONV8_STRIP, &before);
        launch(strip, &after);
        let mut a = vec![0u16; rows * c];
        let mut b = vec![0u16; rows * c];
        dev.read(&before, &mut a).unwrap();
        dev.read(&after, &mut b).unwrap();
        assert!(
            a == b,
            "strip {strip} and {CONV8_STRIP} differ at {rows} rows"
        );
        assert!(a.iter().all(|&v| v != 0xFFFF), "every output written");
        let t_old = per_call_us(&dev, &scratch, || launch(CONV8_STRIP, &before));
        let t_new = per_call_us(&dev, &scratch, || launch(strip, &after));
        println!("| {rows} | {t_old:.1} | {host} | {t_new:.1} |");
    }
}
