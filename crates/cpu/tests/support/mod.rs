//! Shared test inputs: seeded normal values (scale 0.5) and activations
//! made of them.

use headroom_core::ops::Backend;
use headroom_cpu::{CpuAct, CpuBackend};

pub fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| headroom_core::ops::rng::normal(seed, i) * 0.5)
        .collect()
}

pub fn act(be: &CpuBackend, rows: usize, cols: usize, seed: u64) -> CpuAct {
    be.act_from_f32(rows, cols, &values(rows * cols, seed))
        .unwrap()
}
