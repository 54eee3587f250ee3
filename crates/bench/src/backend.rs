//! The interface a compute backend offers the attention bench.

use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};

/// One backend's attention, driven by the bench runner (`cpu` here, `cuda` in
/// `backends/cuda.rs`).
pub trait AttentionBenchBackend {
    fn name(&self) -> &'static str; // "cpu" | "cuda"
    /// Upload/convert inputs (head-major, given as f32) to `dtype` storage.
    fn load(
        &mut self,
        shape: &AttentionShape,
        dtype: Dtype,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> anyhow::Result<()>;
    /// Poison the output with NaN, run the route once, wait for completion; elapsed ms (device events on GPUs) and what actually ran (route, query_block, transient bytes measured by the backend).
    fn run(&mut self, route: RouteRequest) -> anyhow::Result<(f64, AttentionReport)>;
    /// The last output, head-major, converted to f32.
    fn output(&mut self) -> anyhow::Result<Vec<f32>>;
}
