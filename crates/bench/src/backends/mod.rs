//! The bench backends and the factory that picks one by [`BackendKind`].

pub mod cpu;
pub mod cuda;

use crate::backend::AttentionBenchBackend;
use headroom_core::BackendKind;

/// The attention bench backend for `kind` (an error with the reason when it
/// cannot run on this machine or build).
pub fn backend_for(kind: BackendKind) -> anyhow::Result<Box<dyn AttentionBenchBackend>> {
    match kind {
        BackendKind::Cpu => Ok(Box::new(cpu::CpuBackend::default())),
        BackendKind::Cuda => cuda::new(),
    }
}
