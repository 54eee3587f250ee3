//! The CUDA attention bench backend (placeholder until the CUDA engineer
//! replaces this file).

use crate::backend::AttentionBenchBackend;

/// The CUDA backend; not built yet.
pub fn new() -> anyhow::Result<Box<dyn AttentionBenchBackend>> {
    anyhow::bail!("CUDA bench backend not built yet")
}
