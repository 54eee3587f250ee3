//! Opening a [`CudaBackend`]: on a device by ordinal (with the
//! environment's options or given ones), on an opened device (every kernel
//! it launches loaded), as a rank of an NCCL group, and with batch
//! invariance.

use super::CudaBackend;
use crate::config::CudaOptions;
use crate::device::CudaDevice;
use crate::graph::StepGraphs;
use crate::kernels::SOURCES;
use crate::CudaError;
use std::sync::atomic::{AtomicBool, AtomicU64};

impl CudaBackend {
    /// Opens device `ordinal` with the options of the environment
    /// ([`CudaOptions::from_env`], read here once); on a machine without a
    /// driver or GPU, the reason.
    pub fn open(ordinal: usize) -> Result<CudaBackend, CudaError> {
        CudaBackend::open_with(ordinal, CudaOptions::from_env())
    }

    /// Opens device `ordinal` with `options`.
    pub fn open_with(ordinal: usize, options: CudaOptions) -> Result<CudaBackend, CudaError> {
        CudaBackend::on(CudaDevice::open_with(ordinal, options)?)
    }

    /// The backend on an opened device, every kernel it launches loaded (and
    /// compiled on a first run, with progress events: `crate::cache`).
    pub fn on(dev: CudaDevice) -> Result<CudaBackend, CudaError> {
        let arch = dev.arch.clone();
        let sources: Vec<_> = SOURCES
            .iter()
            .filter(|s| s.builds_for(&arch))
            .copied()
            .collect();
        dev.load_kernels(&sources)?;
        Ok(CudaBackend {
            dev,
            earlier_peak: AtomicU64::new(0),
            comm: None,
            graphs: StepGraphs::default(),
            batch_invariant: false,
            fp8_weights: AtomicBool::new(false),
        })
    }

    /// The backend with batch invariance on or off (off by default). On: the
    /// MoE block of a step with few rows runs the grouped-GEMM path instead of
    /// the decode kernels (which keep f32 where the grouped path rounds to
    /// bf16, and sum in another order), so a row's experts give the same bits
    /// alone and among any others — every grouped-GEMM family gives the same
    /// bits per row — and its logits agree within issue 22's 1e-2 (measured:
    /// docs/perf/serving.md, session 16, calls 5–6). The price is the decode
    /// kernels' speed at 1–8 rows (bf16) and 1–32 rows (FP8).
    pub fn with_batch_invariant(self, on: bool) -> CudaBackend {
        CudaBackend {
            batch_invariant: on,
            ..self
        }
    }

    /// The backend on `dev` as a rank of an NCCL group ([`open_group`]).
    pub fn in_group(
        dev: CudaDevice,
        comm: crate::nccl::NcclComm,
    ) -> Result<CudaBackend, CudaError> {
        Ok(CudaBackend {
            comm: Some(comm),
            ..CudaBackend::on(dev)?
        })
    }
}
