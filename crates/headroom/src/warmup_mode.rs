//! `--warmup auto|on|off`: whether `serve` runs the engine's start-up
//! warm-up (`headroom_engine::warmup`) before listening.

use headroom_core::BackendKind;

/// When the start-up warm-up runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WarmupMode {
    /// On a GPU backend (its first steps load kernel modules, plan BLAS
    /// calls and grow memory pools); off on the CPU, which loads nothing on
    /// first use and where a full prefill step of a large model is slow.
    Auto,
    /// Always.
    On,
    /// Never.
    Off,
}

impl WarmupMode {
    /// Whether the warm-up runs on `backend`.
    pub fn runs_on(self, backend: BackendKind) -> bool {
        match self {
            WarmupMode::Auto => backend != BackendKind::Cpu,
            WarmupMode::On => true,
            WarmupMode::Off => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_warms_a_gpu_and_not_the_cpu() {
        assert!(WarmupMode::Auto.runs_on(BackendKind::Cuda));
        assert!(!WarmupMode::Auto.runs_on(BackendKind::Cpu));
        assert!(WarmupMode::On.runs_on(BackendKind::Cpu));
        assert!(!WarmupMode::Off.runs_on(BackendKind::Cuda));
    }
}
