//! Helpers shared by the routed-experts test binaries (`moe.rs`,
//! `moe_few_rows_timing.rs`): the device, seeded bf16 inputs, medians, the
//! 35B-A3B benches' weights and inputs, and one call timed stage by stage.

use half::bf16;
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::device::CudaDevice;
use headroom_cuda::event::StreamEvent as Event;
use headroom_cuda::ops::moe::{routed_experts_marked, GemmImpl, MoeLaunch, MoeStage};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

pub fn device() -> CudaDevice {
    CudaDevice::open(0)
        .expect("a CUDA device (run by bench/gpu/check_moe.sh or bench/gpu/check_moemem.sh)")
}

/// `n` bf16 values uniform in `[-scale, scale)`, seeded, in parallel.
pub fn random_bf16(n: usize, scale: f32, seed: u64) -> Vec<u16> {
    let mut v = vec![0u16; n];
    v.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(seed ^ (c as u64).wrapping_mul(0x9E37_79B9));
        for x in out {
            *x = bf16::from_f32((rng.random::<f32>() * 2.0 - 1.0) * scale).to_bits();
        }
    });
    v
}

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One call of the routed experts on `imp` timed by events at its stages:
/// (whole call ms, [route, gate+up, down, combine] ms summed over its passes).
pub fn timed_call(dev: &CudaDevice, l: &MoeLaunch<'_>, imp: Option<GemmImpl>) -> (f64, [f64; 4]) {
    let mut marks: Vec<(MoeStage, Event)> = Vec::new();
    let start = Event::record(dev).unwrap();
    routed_experts_marked(dev, l, imp, &mut |st| {
        marks.push((st, Event::record(dev).unwrap()));
        Ok(())
    })
    .unwrap();
    let end = Event::record(dev).unwrap();
    let mut per = [0f64; 4];
    for w in marks.windows(2) {
        let ms = w[1].1.ms_since(&w[0].1).unwrap();
        match w[0].0 {
            MoeStage::Route => per[0] += ms,
            MoeStage::GateUp => per[1] += ms,
            MoeStage::Down => per[2] += ms,
            MoeStage::Combine => per[3] += ms,
            MoeStage::End => {}
        }
    }
    (end.ms_since(&start).unwrap(), per)
}

/// The 35B-A3B routed experts of the benches (h 2048, 256 experts, top-8,
/// i 512, renormalised): random weights on the device.
pub struct Bench35b {
    pub gate_up: DeviceBuffer,
    pub down: DeviceBuffer,
}

pub const H: usize = 2048;
pub const E: usize = 256;
pub const K: usize = 8;
pub const I: usize = 512;

/// One bench call's device inputs.
pub struct BenchInputs {
    pub x: DeviceBuffer,
    pub logits: DeviceBuffer,
    pub out: DeviceBuffer,
    pub tokens: usize,
}

impl Bench35b {
    pub fn new(dev: &CudaDevice) -> Bench35b {
        Bench35b {
            gate_up: dev
                .upload(&random_bf16(E * 2 * I * H, 2.0 / (H as f32).sqrt(), 1))
                .unwrap(),
            down: dev
                .upload(&random_bf16(E * H * I, 2.0 / (I as f32).sqrt(), 2))
                .unwrap(),
        }
    }

    /// A `tokens`-row call's inputs: x (seed 3), router logits uniform in
    /// [-2, 2) (seed `seed`; also returned on the host), f32 out.
    pub fn inputs(dev: &CudaDevice, tokens: usize, seed: u64) -> (BenchInputs, Vec<f32>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let logits: Vec<f32> = (0..tokens * E)
            .map(|_| rng.random::<f32>() * 4.0 - 2.0)
            .collect();
        let inputs = BenchInputs {
            x: dev.upload(&random_bf16(tokens * H, 1.0, 3)).unwrap(),
            logits: dev.upload(&logits).unwrap(),
            out: dev.alloc(tokens * H * 4).unwrap(),
            tokens,
        };
        (inputs, logits)
    }

    pub fn launch<'a>(&'a self, i: &'a BenchInputs) -> MoeLaunch<'a> {
        MoeLaunch {
            x: &i.x,
            router_logits: &i.logits,
            gate_up: &self.gate_up,
            down: &self.down,
            out: &i.out,
            tokens: i.tokens,
            hidden: H,
            experts: E,
            top_k: K,
            intermediate: I,
            renormalise: true,
        }
    }
}
