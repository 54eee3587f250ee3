//! The paged attention of one W1 mixed step (issue #22: 8 fresh prompts of
//! 1,024 rows and 345 decode rows after ≈ 1.1k keys, 16 q / 2 kv heads,
//! d 256, gated), timed on the GPU with CUDA events: the whole launch with
//! its items longest first and mixed (`ItemOrder`), and the prompts and the
//! decode rows alone, interleaved sample by sample. Each sample queues
//! `CALLS` launches back to back (the host's planning of one overlaps the
//! previous kernel) and reports the median per launch. Inputs are
//! device-filled constants: speed only (`paged_attention.rs` checks the
//! numbers, and the order changes only which CTA runs an item: the outputs
//! are compared bit for bit here). `print_the_output_fingerprint_of_a_random_mixed_batch`
//! prints a hash of one random batch's output bits, to compare two builds'
//! kernels (session 15: the staged epilogue gives main's bits).
//! GPU only, ignored here; run with
//! `cargo test --release -p headroom-cuda --test mixed_attention_timing -- --ignored --nocapture`.

use headroom_core::Dtype;
use headroom_cuda::attention::{paged_raw_with, ItemOrder, PagedOptions};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::event::StreamEvent as Event;
use rand::{Rng, SeedableRng};

#[path = "support/paged_batch.rs"]
mod paged_batch;
use paged_batch::{median, PagedBatch as Batch, D, KV_HEADS, Q_HEADS};

const SAMPLES: usize = 7;
const CALLS: usize = 10;

/// `(samples, calls a sample)`: `MIXT_ONCE` set (a profiler pass) times one
/// launch after the warm-up.
fn reps() -> (usize, usize) {
    if std::env::var_os("MIXT_ONCE").is_some() {
        (1, 1)
    } else {
        (SAMPLES, CALLS)
    }
}

const PROMPTS: usize = 8;
const PROMPT_LEN: usize = 1024;
const DECODE_ROWS: usize = 345;

impl Batch {
    fn run(&self, dev: &CudaDevice, order: ItemOrder) -> usize {
        let (shape, bufs) = (self.shape(), self.buffers());
        // SAFETY: q, gate and out hold rows × 16 × 256 elements; the pool
        // holds every block of the tables.
        let opts = PagedOptions {
            order,
            ..PagedOptions::default()
        };
        let run = unsafe { paged_raw_with(dev, Dtype::Bf16, &shape, &bufs, opts) }.unwrap();
        run.splits
    }

    /// Microseconds a launch, over `CALLS` back to back.
    fn sample(&self, dev: &CudaDevice, order: ItemOrder) -> f64 {
        let calls = reps().1;
        let a = Event::record(dev).unwrap();
        for _ in 0..calls {
            self.run(dev, order);
        }
        let b = Event::record(dev).unwrap();
        b.ms_since(&a).unwrap() * 1e3 / calls as f64
    }

    fn output(&self, dev: &CudaDevice) -> Vec<u8> {
        let mut host = vec![0u8; self.out.len_bytes()];
        dev.read(&self.out, &mut host).unwrap();
        host
    }
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_w1_mixed_step_attention_by_item_order() {
    let dev = CudaDevice::open(0).expect("a CUDA device");
    assert_eq!(dev.arch, "sm_90a", "the paged kernel is Hopper's");
    let mut rng = rand::rngs::StdRng::seed_from_u64(22);
    let prompts: Vec<(usize, usize)> = vec![(PROMPT_LEN, PROMPT_LEN); PROMPTS];
    let decode: Vec<(usize, usize)> = (0..DECODE_ROWS)
        .map(|_| (1, rng.random_range(1025..=1152)))
        .collect();
    let mixed = Batch::new(&dev, &[prompts.clone(), decode.clone()].concat());
    let prompts_only = Batch::new(&dev, &prompts);
    let decode_only = Batch::new(&dev, &decode);

    // The order moves items between CTAs, not arithmetic: the same bits.
    assert_eq!(mixed.run(&dev, ItemOrder::LongestFirst), 1, "no key splits");
    let longest_out = mixed.output(&dev);
    mixed.run(&dev, ItemOrder::Mixed);
    assert!(
        longest_out == mixed.output(&dev),
        "the two orders' outputs differ"
    );
    assert!(
        !longest_out.iter().all(|&b| b == 0xFF),
        "the launch wrote nothing"
    );

    let (mut lf, mut mx, mut pr, mut de) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps().0 {
        lf.push(mixed.sample(&dev, ItemOrder::LongestFirst));
        mx.push(mixed.sample(&dev, ItemOrder::Mixed));
        pr.push(prompts_only.sample(&dev, ItemOrder::LongestFirst));
        de.push(decode_only.sample(&dev, ItemOrder::LongestFirst));
    }
    let (lf, mx, pr, de) = (median(lf), median(mx), median(pr), median(de));
    let flop = 4.0
        * Q_HEADS as f64
        * D as f64
        * PROMPTS as f64
        * (PROMPT_LEN * (PROMPT_LEN + 1) / 2) as f64;
    let kv_bytes: usize = decode.iter().map(|s| s.1 * KV_HEADS * D * 2 * 2).sum();
    println!("## W1 mixed step attention ({PROMPTS} x {PROMPT_LEN} fresh + {DECODE_ROWS} decode rows, 16/2 heads, d 256, gated), us a launch, median of {:?} (samples, calls)", reps());
    println!("mixed_attn longest-first {lf:.1} us");
    println!("mixed_attn mixed-order {mx:.1} us ({:.3}x)", mx / lf);
    println!(
        "mixed_attn prompts-only {pr:.1} us ({:.0} TFLOP/s causal)",
        flop / pr / 1e6
    );
    println!(
        "mixed_attn decode-only {de:.1} us ({:.2} TB/s of K/V)",
        kv_bytes as f64 / de / 1e6
    );
    println!(
        "mixed_attn sum of the parts {:.1} us; longest-first is {:.2}x the sum",
        pr + de,
        lf / (pr + de)
    );
}

/// Causal FLOPs of `seqs` fresh prompts of `len` rows (16 q heads, d 256).
fn prompt_flop(seqs: usize, len: usize) -> f64 {
    4.0 * Q_HEADS as f64 * D as f64 * seqs as f64 * (len * (len + 1) / 2) as f64
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints the timings"]
fn time_prompt_attention_by_length() {
    // The same 8,192 rows as 8 × 1,024 (W1's mixed step), 2 × 4,096 and one
    // 8,192 prompt: how the kernel's rate falls with the keys a tile sees.
    let dev = CudaDevice::open(0).expect("a CUDA device");
    assert_eq!(dev.arch, "sm_90a", "the paged kernel is Hopper's");
    let shapes = [(8, 1024), (2, 4096), (1, 8192)];
    let batches: Vec<Batch> = shapes
        .iter()
        .map(|&(n, len)| Batch::new(&dev, &vec![(len, len); n]))
        .collect();
    for b in &batches {
        b.run(&dev, ItemOrder::default());
    }
    let mut us = vec![Vec::new(); shapes.len()];
    for _ in 0..reps().0 {
        for (i, b) in batches.iter().enumerate() {
            us[i].push(b.sample(&dev, ItemOrder::default()));
        }
    }
    println!("## fresh prompts, 8,192 rows in all, 16/2 heads, d 256, gated: us a launch, median of {:?} (samples, calls)", reps());
    for (&(n, len), t) in shapes.iter().zip(us) {
        let t = median(t);
        println!(
            "prompt_attn {n} x {len}: {t:.1} us, {:.0} TFLOP/s causal",
            prompt_flop(n, len) / t / 1e6
        );
    }
}

/// FNV-1a of bytes: a fingerprint to compare two builds' outputs.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): prints a fingerprint of the output bits"]
fn print_the_output_fingerprint_of_a_random_mixed_batch() {
    // Two builds (before / after a kernel change) print the same fingerprint
    // when their paged kernels give the same bits. Random bf16 in [-2, 2)
    // (gate, q, k, v from one seed): prompts, decode rows, a packed chunk,
    // a chunk after history and a 63-row prompt.
    let dev = CudaDevice::open(0).expect("a CUDA device");
    let seqs = [
        vec![(1024, 1024); 2],
        vec![(1, 1100); 20],
        vec![(5, 305), (100, 1100), (63, 63)],
    ]
    .concat();
    let b = Batch::new(&dev, &seqs);
    let mut rng = rand::rngs::StdRng::seed_from_u64(15);
    for buf in [&b.q, &b.gate, &b.k, &b.v] {
        let host: Vec<u16> = (0..buf.len_bytes() / 2)
            .map(|_| {
                let x: f32 = rng.random_range(-2.0..2.0);
                (x.to_bits() >> 16) as u16
            })
            .collect();
        dev.write(buf, &host).unwrap();
    }
    b.run(&dev, ItemOrder::default());
    let out = b.output(&dev);
    assert!(!out.iter().all(|&x| x == 0xFF), "the launch wrote nothing");
    println!(
        "paged output fingerprint {:016x} ({} bytes)",
        fnv1a(&out),
        out.len()
    );
}
