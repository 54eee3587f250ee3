//! The activation bytes a row of a step holds, measured on the device at
//! start-up ([`calibrate`]), as vLLM's profile run measures its peak before
//! sizing the KV cache. The model's estimate
//! (`headroom_model::memory::activation_bytes_per_row`) counts every buffer
//! of the largest layer live at once: an upper bound, about twice what a
//! CUDA step of the 35B-A3B holds (74,880 bytes a row measured on an H100
//! from 512 to 16,384 rows, against 147,456 estimated; docs/perf/serving.md,
//! session 30). Every byte over-counted is memory the pools and the solo
//! stripe never get, which on an 80 GB card serving the bf16 35B is a
//! quarter of the running sequences.
//!
//! The measurement: one prompt of [`CALIBRATION_ROWS`] rows (at most the
//! context) through a one-slot state, twice; the second run's peak above
//! what each rank holds after it (the first run pays the kernels' first
//! use: a library's workspace, kept, is not the step's) less its one row of
//! logits, per row, plus a sixteenth ([`MARGIN`]) — the rows' bytes are
//! linear in the row count (the same bytes a row at 512 and at 16,384 rows)
//! but not to the byte across presets and routes. The largest rank's
//! figure is taken. The attention workspace stays the backend's own
//! answer, added on top (`WorkspaceModel`), so the figure may count a little
//! of it twice, never less.

use crate::memory::MemoryModel;
use headroom_core::ops::{Backend, Batch};
use headroom_core::{BackendKind, RouteRequest};
use headroom_model::{LogitsRows, ModelError, StepModel};
use serde::Serialize;

/// Rows of the measured prompt (fewer where the context is shorter).
pub const CALIBRATION_ROWS: usize = 4096;

/// What the measured bytes a row are multiplied by (numerator, denominator).
pub const MARGIN: (u64, u64) = (17, 16);

/// One calibration's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Calibration {
    /// Rows of the measured prompt.
    pub rows: usize,
    /// Bytes a row the step held at its peak (the largest rank's).
    pub measured_bytes_per_row: u64,
    /// The model's estimate it replaces.
    pub estimate_bytes_per_row: u64,
    /// What the memory model now counts: measured plus [`MARGIN`].
    pub applied_bytes_per_row: u64,
}

impl std::fmt::Display for Calibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step activations measured: {} bytes a row over a {}-row prompt; counted {} \
             (the shape's estimate {})",
            self.measured_bytes_per_row,
            self.rows,
            self.applied_bytes_per_row,
            self.estimate_bytes_per_row
        )
    }
}

impl Calibration {
    /// Makes `memory` count the applied bytes a row.
    pub fn apply_to(&self, memory: &mut MemoryModel) {
        memory.activation_bytes_per_row = self.applied_bytes_per_row;
    }
}

/// The bytes a row with [`MARGIN`].
pub fn with_margin(measured: u64) -> u64 {
    measured
        .saturating_mul(MARGIN.0)
        .div_ceil(MARGIN.1)
        .max(measured)
}

/// Measures `model`'s step activations a row on `routes` (see the module
/// doc) for a memory model whose estimate is `memory`'s, the prompt at most
/// `max_context` rows. Allocates one state slot and the step's transients;
/// an error (a device out of memory) leaves nothing allocated.
pub fn calibrate<B: Backend, M: StepModel<B>>(
    model: &M,
    routes: &[Option<RouteRequest>],
    memory: &MemoryModel,
    max_context: usize,
) -> Result<Calibration, ModelError> {
    let rows = CALIBRATION_ROWS.min(max_context).max(1);
    let vocab = model.lead().vocab_size().max(1) as u64;
    let ids: Vec<u32> = (0..rows as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) % vocab) as u32)
        .collect();
    let batch = Batch::single(0, 0, rows);
    let mut transient = 0u64;
    for _ in 0..2 {
        let mut state = model.new_state(1, rows, None)?;
        model.reset_peak_memory();
        let out = model.step(&mut state, &ids, &batch, routes, LogitsRows::Last)?;
        drop(out);
        transient = model
            .rank_memory()
            .iter()
            .map(|&(after, peak)| peak.saturating_sub(after) as u64)
            .max()
            .unwrap_or(0);
        drop(state);
    }
    let measured = transient
        .saturating_sub(memory.logits_bytes_per_row)
        .div_ceil(rows as u64);
    Ok(Calibration {
        rows,
        measured_bytes_per_row: measured,
        estimate_bytes_per_row: memory.activation_bytes_per_row,
        applied_bytes_per_row: with_margin(measured),
    })
}

/// On a CUDA engine, [`calibrate`] and count the applied bytes a row in
/// `memory` (logged); elsewhere, or where the measurement fails (logged as
/// a warning), `memory` keeps the shape's estimate and this is `None`. The
/// allocator's cache of the measured steps is given back to the device.
pub(crate) fn on_gpu<B: Backend, M: StepModel<B>>(
    model: &M,
    routes: &[Option<RouteRequest>],
    memory: &mut MemoryModel,
    max_context: usize,
) -> Option<Calibration> {
    if model.lead().backend().kind() != BackendKind::Cuda {
        return None;
    }
    let measured = calibrate(model, routes, memory, max_context);
    model.release_cached_memory();
    match measured {
        Ok(c) => {
            tracing::info!("{c}");
            c.apply_to(memory);
            Some(c)
        }
        Err(e) => {
            tracing::warn!(
                "the step activations could not be measured ({e}); the memory plan counts the \
                 shape's estimate of {} bytes a row",
                memory.activation_bytes_per_row
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::memory_model;
    use headroom_cpu::CpuBackend;
    use headroom_model::{AttentionPlan, ModelConfig, Qwen35Model};

    #[test]
    fn the_margin_is_a_sixteenth_rounded_up() {
        assert_eq!(with_margin(74_880), 79_560);
        assert_eq!(with_margin(17), 19);
        assert_eq!(with_margin(0), 0);
        assert_eq!(with_margin(u64::MAX), u64::MAX);
    }

    /// On the CPU (whose backend counts its attention's transients) the
    /// measurement runs, its prompt is cut to the context, and what it
    /// measures is within the shape's estimate; an engine on the CPU keeps
    /// the estimate (`on_gpu` measures only on CUDA). The GPU test
    /// `cuda_memory` checks the figure against CUDA steps.
    #[test]
    fn the_cpu_measures_within_the_estimate_and_keeps_it() {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        let model = Qwen35Model::synthetic(CpuBackend::new(), &cfg, 5).unwrap();
        let routes = model
            .routes(&AttentionPlan::Uniform(RouteRequest::Composed {
                query_block: 64,
            }))
            .unwrap();
        let mut memory = memory_model(&model, &routes);
        let c = calibrate(&model, &routes, &memory, 300).unwrap();
        assert_eq!(c.rows, 300);
        assert!(c.measured_bytes_per_row > 0, "{c}");
        assert!(
            c.measured_bytes_per_row <= c.estimate_bytes_per_row,
            "{c}: the estimate is an upper bound"
        );
        assert_eq!(
            c.applied_bytes_per_row,
            with_margin(c.measured_bytes_per_row)
        );
        assert!(format!("{c}").contains("over a 300-row prompt"), "{c}");
        let estimate = memory.activation_bytes_per_row;
        assert_eq!(on_gpu(&model, &routes, &mut memory, 300), None);
        assert_eq!(memory.activation_bytes_per_row, estimate);
    }
}
