//! Progress of long work (kernel compilation, checkpoint loading, synthetic
//! weight drawing), reported as `tracing` events with one target so that
//! libraries stay free of terminal code. The binary decides how to show them:
//! a progress line on a terminal, nothing on a pipe.
//!
//! Contract: every event has target [`TARGET`] and the fields `task` (a stable
//! short name such as `"kernels"`), `done`, `total` (`u64`, same unit), `unit`
//! (`"kernels"`, `"bytes"`, `"tensors"`, ...) and a human `message`.
//! `done == total` ends the task.

/// The `tracing` target of every progress event.
pub const TARGET: &str = "headroom::progress";

/// Report that `task` has reached `done` of `total` (`unit`), with a human message.
pub fn report(task: &'static str, done: u64, total: u64, unit: &'static str, message: &str) {
    tracing::info!(target: TARGET, task, done, total, unit, message);
}
