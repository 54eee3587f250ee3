//! Sampling on the device (`ops_sample.cu`, one CTA per row): greedy argmax
//! (lowest index on ties) or temperature / top-k / top-p with the uniform
//! `rng::uniform(seed, step)` of each row, computed on the host (it is a pure
//! function of `(seed, step)`).

mod drawn;
pub mod sources;

pub use drawn::Drawn;

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{alloc, dev_err, grid_dim, int, launch, upload, Args, GRID_X, GRID_YZ};
use crate::tensor::CudaAct;
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
    match draw(dev, logits, params, steps)? {
        Some(out) => read_tokens(dev, &out, logits.rows),
        None => Ok(Vec::new()),
    }
}

/// [`sample`] whose tokens are read later ([`Drawn::read`]): the draw and
/// the tokens' copy to the host are queued, nothing is waited for.
pub(crate) fn sample_later(
    dev: &CudaDevice,
    logits: &CudaAct,
    params: &[SamplingParams],
    steps: &[u64],
) -> OpResult<Drawn> {
    match draw(dev, logits, params, steps)? {
        Some(out) => Drawn::queue(dev, out, logits.rows),
        None => Ok(Drawn::empty()),
    }
}

/// Queues the draw of one token per row of `logits` into a fresh buffer
/// (u32 per row); `None` for zero rows.
fn draw(
    dev: &CudaDevice,
    logits: &CudaAct,
    params: &[SamplingParams],
    steps: &[u64],
) -> OpResult<Option<DeviceBuffer>> {
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
        return Ok(None);
    }
    if logits.cols == 0 {
        return Err(OpError::shape(op, "empty vocabulary"));
    }
    let vocab = int(op, "vocab", logits.cols)?;
    if let Some(p) = params
        .iter()
        .find(|p| !(p.top_p > 0.0 && p.top_p <= 1.0) || p.temperature.is_nan())
    {
        return Err(OpError::shape(op, format!("bad sampling parameters {p:?}")));
    }
    let entry = match logits.dtype {
        Dtype::Bf16 => "sample_bf16",
        Dtype::F32 => "sample_f32",
        Dtype::F16 => return Err(OpError::shape(op, "f16 logits are not used on CUDA")),
    };
    let out = alloc(dev, 4 * logits.rows)?;
    if params.iter().all(|p| p.temperature <= 0.0) {
        greedy(dev, logits, vocab, &out)?;
        return Ok(Some(out));
    }
    let table: Vec<f64> = params
        .iter()
        .zip(steps)
        .flat_map(|(p, &s)| {
            [
                p.temperature as f64,
                p.top_p as f64,
                p.top_k as f64,
                rng::uniform(p.seed, s),
            ]
        })
        .collect();
    let table = upload(dev, &table)?;
    let args = Args::new()
        .ptr(logits.ptr())
        .i32(vocab)
        .ptr(table.ptr())
        .ptr(out.ptr());
    let grid = (grid_dim(op, logits.rows, GRID_X)?, 1, 1);
    // SAFETY: logits is [rows][vocab]; 4 parameters and one output per row.
    unsafe { launch(dev, entry, grid, SAMPLE_THREADS, args)? };
    Ok(Some(out))
}

/// Threads of the split argmax kernels (`ARGMAX_THREADS` in the kernel).
const ARGMAX_THREADS: u32 = 256;
/// Logits per CTA of `argmax_slices_*` (`ARGMAX_SLICE` in the kernel).
const ARGMAX_SLICE: usize = 8192;

/// A batch of greedy rows: the row's argmax split over CTAs of
/// [`ARGMAX_SLICE`] logits, then one CTA per row over the slices' partials.
fn greedy(dev: &CudaDevice, logits: &CudaAct, vocab: i32, out: &DeviceBuffer) -> OpResult<()> {
    let op = "sample";
    let slices = logits.cols.div_ceil(ARGMAX_SLICE);
    let parts = slices
        .checked_mul(logits.rows)
        .ok_or_else(|| OpError::shape(op, "slices × rows overflows"))?;
    let (part_v, part_i) = (alloc(dev, 4 * parts)?, alloc(dev, 4 * parts)?);
    let entry = argmax_entry(logits.dtype, logits.cols, logits.ptr());
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

/// The slice kernel for `cols` logits a row of `dtype` at device address
/// `ptr`: bf16 rows of a multiple of 8 logits from a 16-byte aligned buffer
/// take the 16-byte loads (every row then starts aligned).
fn argmax_entry(dtype: Dtype, cols: usize, ptr: u64) -> &'static str {
    match dtype {
        Dtype::Bf16 if cols.is_multiple_of(8) && ptr.is_multiple_of(16) => "argmax_slices_v8_bf16",
        Dtype::Bf16 => "argmax_slices_bf16",
        _ => "argmax_slices_f32",
    }
}

/// Reads the sampled tokens back (the step's one synchronisation); a row
/// without a finite logit is an error.
fn read_tokens(dev: &CudaDevice, out: &DeviceBuffer, rows: usize) -> OpResult<Vec<u32>> {
    let mut tokens = vec![0u32; rows];
    crate::decode_stats::before_readback(dev.options().decode_stats, dev);
    let queued = Instant::now();
    dev.read(out, &mut tokens).map_err(dev_err)?;
    tokens_read(dev, queued, tokens)
}

/// A step's tokens just read back (its wait began at `queued`): the decode
/// statistics and the profile window see the step end; an error names the
/// first row whose draw found no finite logit (the kernels write `u32::MAX`
/// there).
fn tokens_read(dev: &CudaDevice, queued: Instant, tokens: Vec<u32>) -> OpResult<Vec<u32>> {
    crate::decode_stats::step_done(dev.options().decode_stats, queued, tokens.len());
    crate::profile_window::step_done(dev.options().profile_step);
    match tokens.iter().position(|&t| t == u32::MAX) {
        Some(row) => Err(OpError::shape(
            "sample",
            format!("row {row} has no finite logit"),
        )),
        None => Ok(tokens),
    }
}

#[cfg(test)]
mod tests {
    use super::sources::OPS_SAMPLE;
    use super::{argmax_entry, ARGMAX_SLICE, ARGMAX_THREADS, SAMPLE_THREADS};
    use crate::kernels::source_constant;
    use headroom_core::Dtype;

    #[test]
    fn argmax_takes_16_byte_loads_only_for_aligned_bf16_rows_of_eights() {
        assert_eq!(
            argmax_entry(Dtype::Bf16, 248_320, 0x1000),
            "argmax_slices_v8_bf16"
        );
        assert_eq!(
            argmax_entry(Dtype::Bf16, 248_321, 0x1000),
            "argmax_slices_bf16"
        );
        assert_eq!(
            argmax_entry(Dtype::Bf16, 248_320, 0x1008),
            "argmax_slices_bf16"
        );
        assert_eq!(
            argmax_entry(Dtype::F32, 248_320, 0x1000),
            "argmax_slices_f32"
        );
        // ARGMAX_SLICE is whole 16-byte loads of every thread.
        assert_eq!(ARGMAX_SLICE % (8 * ARGMAX_THREADS as usize), 0);
    }

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
