//! Sampling on the device (`ops_sample.cu`, one CTA per row): greedy argmax
//! (lowest index on ties) or temperature / top-k / top-p with the uniform
//! `rng::uniform(seed, step)` of each row, computed on the host (it is a pure
//! function of `(seed, step)`).

use super::launch::{alloc, dev_err, grid_dim, int, launch, upload, Args, GRID_X, GRID_YZ};
use super::types::CudaAct;
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use headroom_core::ops::{rng, OpError, OpResult, SamplingParams};
use headroom_core::Dtype;
use std::time::Instant;

/// Threads per row (`SAMPLE_THREADS` in the kernel).
pub(crate) const SAMPLE_THREADS: u32 = 1024;

pub(crate) fn sample(
    dev: &CudaDevice,
    logits: &CudaAct,
    params: &[SamplingParams],
    steps: &[u64],
) -> OpResult<Vec<u32>> {
    let op = "sample";
    if params.len() != logits.rows || steps.len() != logits.rows {
        return Err(OpError::shape(
            op,
            format!(
                "{} rows, {} params, {} steps",
                logits.rows,
                params.len(),
                steps.len()
            ),
        ));
    }
    if logits.rows == 0 {
        return Ok(Vec::new());
    }
    if logits.cols == 0 {
        return Err(OpError::shape(op, "empty vocabulary"));
    }
    let vocab = int(op, "vocab", logits.cols)?;
    let mut table = Vec::with_capacity(4 * params.len());
    for (p, &s) in params.iter().zip(steps) {
        if !(p.top_p > 0.0 && p.top_p <= 1.0) || p.temperature.is_nan() {
            return Err(OpError::shape(op, format!("bad sampling parameters {p:?}")));
        }
        table.extend([
            p.temperature as f64,
            p.top_p as f64,
            p.top_k as f64,
            rng::uniform(p.seed, s),
        ]);
    }
    let entry = match logits.dtype {
        Dtype::Bf16 => "sample_bf16",
        Dtype::F32 => "sample_f32",
        Dtype::F16 => return Err(OpError::shape(op, "f16 logits are not used on CUDA")),
    };
    let out = alloc(dev, 4 * logits.rows)?;
    if params.iter().all(|p| p.temperature <= 0.0) {
        greedy(dev, logits, vocab, &out)?;
        return read_tokens(dev, &out, logits.rows);
    }
    let table = upload(dev, &table)?;
    let args = Args::new()
        .ptr(logits.ptr())
        .i32(vocab)
        .ptr(table.ptr())
        .ptr(out.ptr());
    let grid = (grid_dim(op, logits.rows, GRID_X)?, 1, 1);
    // SAFETY: logits is [rows][vocab]; 4 parameters and one output per row.
    unsafe { launch(dev, entry, grid, SAMPLE_THREADS, args)? };
    read_tokens(dev, &out, logits.rows)
}

/// Threads of the split argmax kernels (`ARGMAX_THREADS` in the kernel).
const ARGMAX_THREADS: u32 = 256;
/// Logits per CTA of `argmax_slices_*` (`ARGMAX_SLICE` in the kernel).
const ARGMAX_SLICE: usize = 8192;

/// A batch of greedy rows: the row's argmax split over CTAs of
/// [`ARGMAX_SLICE`] logits, then one CTA per row over the slices' partials
/// (one CTA over a 248k vocabulary took ≈ 100 µs a decode step).
fn greedy(dev: &CudaDevice, logits: &CudaAct, vocab: i32, out: &DeviceBuffer) -> OpResult<()> {
    let op = "sample";
    let slices = logits.cols.div_ceil(ARGMAX_SLICE);
    let parts = slices
        .checked_mul(logits.rows)
        .ok_or_else(|| OpError::shape(op, "slices × rows overflows"))?;
    let (part_v, part_i) = (alloc(dev, 4 * parts)?, alloc(dev, 4 * parts)?);
    let entry = match logits.dtype {
        Dtype::Bf16 => "argmax_slices_bf16",
        _ => "argmax_slices_f32",
    };
    let args = Args::new()
        .ptr(logits.ptr())
        .i32(vocab)
        .ptr(part_v.ptr())
        .ptr(part_i.ptr());
    let grid = (
        grid_dim(op, slices, GRID_X)?,
        grid_dim(op, logits.rows, GRID_YZ)?,
        1,
    );
    // SAFETY: logits is [rows][vocab]; one partial per (row, slice).
    unsafe { launch(dev, entry, grid, ARGMAX_THREADS, args)? };
    let args = Args::new()
        .ptr(part_v.ptr())
        .ptr(part_i.ptr())
        .i32(int(op, "slices", slices)?)
        .ptr(out.ptr());
    let grid = (grid_dim(op, logits.rows, GRID_X)?, 1, 1);
    // SAFETY: `slices` partials per row, one output per row.
    unsafe { launch(dev, "argmax_finish", grid, ARGMAX_THREADS, args) }
}

/// Reads the sampled tokens back (the step's one synchronisation); a row
/// without a finite logit is an error.
fn read_tokens(dev: &CudaDevice, out: &DeviceBuffer, rows: usize) -> OpResult<Vec<u32>> {
    let mut tokens = vec![0u32; rows];
    let queued = Instant::now();
    dev.read(out, &mut tokens).map_err(dev_err)?;
    stats::step_done(queued);
    super::profile_window::step_done();
    if let Some(row) = tokens.iter().position(|&t| t == u32::MAX) {
        return Err(OpError::shape(
            "sample",
            format!("row {row} has no finite logit"),
        ));
    }
    Ok(tokens)
}

/// `HEADROOM_DECODE_STATS=1`: where a step's wall time goes, measured at the
/// one host synchronisation of a step (the sampled tokens' read-back). Each
/// step's wall time (sample to sample) splits into the host's time to queue
/// the step and the wait for the GPU to finish it: a wait near zero means the
/// host is the bound (launch overhead), a long wait means the GPU is. Every
/// 16 decode steps one line goes to stderr with the means and the kernels launched
/// per step through `launch::launch` (cuBLAS and a few launchers not counted).
mod stats {
    use super::super::launch::LAUNCHES;
    use std::sync::atomic::Ordering;
    use std::sync::{Mutex, OnceLock};
    use std::time::Instant;

    /// Steps per reported window.
    const WINDOW_STEPS: u32 = 16;
    /// A step longer than this is not a decode step (a prefill).
    const LONG_STEP_US: f64 = 100_000.0;

    struct Window {
        last: Option<Instant>,
        launches: u64,
        steps: u32,
        wall_us: f64,
        wait_us: f64,
    }

    fn on() -> bool {
        static ON: OnceLock<bool> = OnceLock::new();
        *ON.get_or_init(|| std::env::var("HEADROOM_DECODE_STATS").is_ok_and(|v| v == "1"))
    }

    static WINDOW: Mutex<Window> = Mutex::new(Window {
        last: None,
        launches: 0,
        steps: 0,
        wall_us: 0.0,
        wait_us: 0.0,
    });

    /// Called after the read-back that began (waiting) at `queued`.
    pub(super) fn step_done(queued: Instant) {
        if !on() {
            return;
        }
        let now = Instant::now();
        let mut w = WINDOW.lock().unwrap_or_else(|p| p.into_inner());
        let launches = LAUNCHES.load(Ordering::Relaxed);
        let wall = w.last.map(|l| (now - l).as_secs_f64() * 1e6);
        w.last = Some(now);
        match wall {
            // A prefill (or the first call): start a new window.
            None => {}
            Some(us) if us > LONG_STEP_US => {}
            Some(us) => {
                w.steps += 1;
                w.wall_us += us;
                w.wait_us += (now - queued).as_secs_f64() * 1e6;
                if w.steps < WINDOW_STEPS {
                    return;
                }
            }
        }
        if w.steps == WINDOW_STEPS {
            let n = w.steps as f64;
            eprintln!(
                "decode stats: step {:.1} us = host queue {:.1} us + wait for the GPU {:.1} us; \
                 {:.0} launches/step (launch.rs only)",
                w.wall_us / n,
                (w.wall_us - w.wait_us) / n,
                w.wait_us / n,
                (launches - w.launches) as f64 / n
            );
        }
        w.steps = 0;
        w.wall_us = 0.0;
        w.wait_us = 0.0;
        w.launches = launches;
    }
}

#[cfg(test)]
mod tests {
    use super::{ARGMAX_SLICE, ARGMAX_THREADS, SAMPLE_THREADS};
    use crate::kernels::{source_constant, OPS_SAMPLE};

    #[test]
    fn launch_constants_equal_the_kernels() {
        let src = OPS_SAMPLE.source;
        assert_eq!(source_constant(src, "ARGMAX_SLICE"), ARGMAX_SLICE);
        assert_eq!(
            source_constant(src, "ARGMAX_THREADS") as u32,
            ARGMAX_THREADS
        );
        assert_eq!(
            source_constant(src, "SAMPLE_THREADS") as u32,
            SAMPLE_THREADS
        );
    }
}
