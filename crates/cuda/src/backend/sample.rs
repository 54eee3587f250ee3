//! Sampling on the device (`ops_sample.cu`, one CTA per row): greedy argmax
//! (lowest index on ties) or temperature / top-k / top-p with the uniform
//! `rng::uniform(seed, step)` of each row, computed on the host (it is a pure
//! function of `(seed, step)`).

use super::launch::{alloc, dev_err, grid_dim, int, launch, upload, Args, GRID_X};
use super::types::CudaAct;
use crate::device::CudaDevice;
use headroom_core::ops::{rng, OpError, OpResult, SamplingParams};
use headroom_core::Dtype;

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
    let table = upload(dev, &table)?;
    let out = alloc(dev, 4 * logits.rows)?;
    let args = Args::new()
        .ptr(logits.ptr())
        .i32(vocab)
        .ptr(table.ptr())
        .ptr(out.ptr());
    let grid = (grid_dim(op, logits.rows, GRID_X)?, 1, 1);
    // SAFETY: logits is [rows][vocab]; 4 parameters and one output per row.
    unsafe { launch(dev, entry, grid, SAMPLE_THREADS, args)? };
    let mut tokens = vec![0u32; logits.rows];
    dev.read(&out, &mut tokens).map_err(dev_err)?;
    if let Some(row) = tokens.iter().position(|&t| t == u32::MAX) {
        return Err(OpError::shape(op, format!("row {row} has no finite logit")));
    }
    Ok(tokens)
}
