//! Timing prefill attention on the device: random inputs, warm-up, then
//! CUDA events around each call; the median is the figure reported.

use crate::alloc::DeviceBuffer;
use crate::attention::{prefill, AttentionBuffers};
use crate::device::CudaDevice;
use crate::event::StreamEvent;
use crate::CudaError;
use half::{bf16, f16};
use headroom_core::{AttentionReport, AttentionShape, Dtype, Element, RouteRequest};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

/// Device tensors of one call.
pub struct Inputs {
    pub q: DeviceBuffer,
    pub k: DeviceBuffer,
    pub v: DeviceBuffer,
    pub out: DeviceBuffer,
}

impl Inputs {
    pub fn buffers(&self) -> AttentionBuffers<'_> {
        AttentionBuffers {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            out: &self.out,
        }
    }
}

/// `n` values uniform in [-1, 1) in `dtype`'s bit pattern (parallel, seeded).
pub fn random_bits(n: usize, dtype: Dtype, seed: u64) -> Vec<u16> {
    fn fill<T: Element>(out: &mut [u16], seed: u64, to_bits: fn(T) -> u16) {
        out.par_chunks_mut(1 << 16).enumerate().for_each(|(i, c)| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(
                seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            for x in c {
                *x = to_bits(T::from_f32(rng.random::<f32>() * 2.0 - 1.0));
            }
        });
    }
    let mut v = vec![0u16; n];
    match dtype {
        Dtype::Bf16 => fill::<bf16>(&mut v, seed, bf16::to_bits),
        _ => fill::<f16>(&mut v, seed, f16::to_bits),
    }
    v
}

/// Uploads fresh random q/k/v and an output buffer for `shape` (16-bit dtypes).
pub fn random_inputs(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    seed: u64,
) -> Result<Inputs, CudaError> {
    Ok(Inputs {
        q: dev.upload(&random_bits(shape.q_elems(), dtype, seed))?,
        k: dev.upload(&random_bits(shape.kv_elems(), dtype, seed.wrapping_add(1)))?,
        v: dev.upload(&random_bits(shape.kv_elems(), dtype, seed.wrapping_add(2)))?,
        out: dev.alloc(shape.q_elems() * dtype.size_bytes())?,
    })
}

/// One timed configuration.
#[derive(Debug, Clone)]
pub struct Timed {
    pub report: AttentionReport,
    /// Device time of each timed call, ms.
    pub times_ms: Vec<f64>,
    pub median_ms: f64,
    /// Causal FLOPs over the median time.
    pub tflops: f64,
}

/// Runs one call between two events; returns its device time in ms and its report.
pub fn time_once(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    route: RouteRequest,
    bufs: &AttentionBuffers<'_>,
) -> Result<(f64, AttentionReport), CudaError> {
    let start = StreamEvent::record(dev)?;
    let report = prefill(dev, shape, dtype, route, bufs)?;
    let end = StreamEvent::record(dev)?;
    Ok((end.ms_since(&start)?, report))
}

/// Times `iters` calls after `warmup` untimed ones; the report is the last call's.
pub fn time_prefill(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    route: RouteRequest,
    inputs: &Inputs,
    warmup: usize,
    iters: usize,
) -> Result<Timed, CudaError> {
    let bufs = inputs.buffers();
    for _ in 0..warmup {
        prefill(dev, shape, dtype, route, &bufs)?;
    }
    dev.synchronize()?;
    let mut times_ms = Vec::with_capacity(iters);
    let mut report = None;
    for _ in 0..iters.max(1) {
        let (ms, r) = time_once(dev, shape, dtype, route, &bufs)?;
        times_ms.push(ms);
        report = Some(r);
    }
    let mut sorted = times_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ms = sorted[sorted.len() / 2];
    Ok(Timed {
        report: report.expect("at least one call"),
        tflops: shape.causal_flops() / (median_ms * 1e-3) / 1e12,
        times_ms,
        median_ms,
    })
}
