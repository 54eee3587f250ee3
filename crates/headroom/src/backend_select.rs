//! Picks the compute backend at run time and builds the model on it: the
//! commands are generic over `headroom_core::Backend` and run through a
//! [`ModelJob`], monomorphised once per backend here.
//!
//! * `--backend cpu`: [`CpuBackend`] (f32 activations).
//! * `--backend cuda`: `CudaBackend` on device 0 (bf16 activations); on a
//!   machine without a GPU, driver or NVRTC this is an ordinary error naming
//!   what is missing (never a panic).
//!
//! Synthetic weights: `--weights-init host` draws every tensor on the host
//! (`Weights::synthetic`, the CPU default); `device` draws the matrices on
//! the backend's device from the counter-based stream of `headroom_core::ops::rng`
//! (the CUDA default: the 35B shape initialises in seconds instead of
//! building 65 GB on the host). The same `device` draw on the CPU gives the
//! same weights, so CPU and CUDA can be compared on it.

use crate::model_source::ModelSource;
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_cpu::CpuBackend;
use headroom_cuda::backend::CudaBackend;
use headroom_model::{ModelConfig, Qwen35Model, Weights};
use std::time::Instant;

/// Where a synthetic model's weights are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsInit {
    /// On the host (`Weights::synthetic`), then uploaded.
    Host,
    /// Matrices on the backend's device from the counter-based stream.
    Device,
}

/// How the backend computes, besides the model and its weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendSettings {
    /// A row's arithmetic the same whatever else is in its step
    /// (`--batch-invariant`; docs/configuration.md). The CPU backend is
    /// batch-invariant anyway; on CUDA it takes the MoE decode kernels out
    /// (`CudaBackend::with_batch_invariant`).
    pub batch_invariant: bool,
}

/// Work to run on a model, whatever backend it was built on.
pub trait ModelJob {
    type Output;
    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<Self::Output>;
}

/// What building the model took.
#[derive(Debug, Clone)]
pub struct LoadInfo {
    pub backend: BackendKind,
    /// Opening the backend (device and context; nothing on the CPU).
    pub open_seconds: f64,
    /// Building the model: reading or drawing the weights and uploading them.
    pub load_seconds: f64,
    /// Backend memory held after loading (weights and nothing else), bytes.
    pub weight_bytes: usize,
}

/// The model source's config (validated).
pub fn load_config(source: &ModelSource) -> anyhow::Result<ModelConfig> {
    match (&source.synthetic, &source.model) {
        (Some(name), None) => {
            ModelConfig::synthetic(name).with_context(|| format!("synthetic model `{name}`"))
        }
        (None, Some(dir)) => {
            ModelConfig::from_dir(dir).with_context(|| format!("model folder {}", dir.display()))
        }
        _ => bail!("name a model with --synthetic NAME or --model DIR"),
    }
}

/// Builds the model `source` names on `backend` and runs `job` on it.
pub fn run_on_backend<J: ModelJob>(
    backend: BackendKind,
    settings: BackendSettings,
    source: &ModelSource,
    cfg: &ModelConfig,
    seed: u64,
    init: Option<WeightsInit>,
    job: J,
) -> anyhow::Result<J::Output> {
    match backend {
        BackendKind::Cpu => {
            let init = init.unwrap_or(WeightsInit::Host);
            build_and_run(CpuBackend::new(), 0.0, source, cfg, seed, init, job)
        }
        BackendKind::Cuda => {
            let opening = Instant::now();
            let be = CudaBackend::open(0)
                .map_err(|e| anyhow::anyhow!("the cuda backend is unavailable: {e}"))?
                .with_batch_invariant(settings.batch_invariant);
            let open_seconds = opening.elapsed().as_secs_f64();
            if settings.batch_invariant {
                tracing::info!(
                    "batch-invariant: the MoE block of small steps on the grouped GEMMs"
                );
            }
            let init = init.unwrap_or(WeightsInit::Device);
            build_and_run(be, open_seconds, source, cfg, seed, init, job)
        }
    }
}

fn build_and_run<B: Backend + 'static, J: ModelJob>(
    be: B,
    open_seconds: f64,
    source: &ModelSource,
    cfg: &ModelConfig,
    seed: u64,
    init: WeightsInit,
    job: J,
) -> anyhow::Result<J::Output> {
    let kind = be.kind();
    let started = Instant::now();
    let model = match (&source.synthetic, &source.model, init) {
        (Some(_), None, WeightsInit::Device) => {
            Qwen35Model::synthetic(be, cfg, seed).context("drawing the synthetic weights")?
        }
        (Some(name), None, WeightsInit::Host) => {
            let weights = Weights::synthetic(cfg, seed);
            tracing::info!(
                "synthetic {name}: {:.2} GB of weights drawn on the host",
                weights.storage_bytes() as f64 / 1e9
            );
            Qwen35Model::load(be, cfg, weights).context("building the model")?
        }
        (None, Some(dir), _) => {
            let weights =
                Weights::load(dir, cfg).with_context(|| format!("weights of {}", dir.display()))?;
            Qwen35Model::load(be, cfg, weights).context("building the model")?
        }
        _ => bail!("name a model with --synthetic NAME or --model DIR"),
    };
    model
        .backend()
        .synchronize()
        .context("waiting for the weights")?;
    let info = LoadInfo {
        backend: kind,
        open_seconds,
        load_seconds: started.elapsed().as_secs_f64(),
        weight_bytes: model.backend().memory().0,
    };
    tracing::info!(
        backend = %kind,
        weight_format = %cfg.weight_format.describe(),
        seconds = info.load_seconds,
        weight_gib = crate::describe::gib(info.weight_bytes as u64),
        "model loaded"
    );
    job.run(model, &info)
}
