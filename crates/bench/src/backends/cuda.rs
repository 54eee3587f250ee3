//! The CUDA attention bench backend: inputs uploaded once in the storage
//! dtype, the output NaN-poisoned on the device before every run, each run
//! timed with CUDA events, transient bytes from the caching allocator.

use crate::backend::AttentionBenchBackend;
use anyhow::Context;
use half::{bf16, f16};
use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::timing::{time_once, Inputs};

struct Loaded {
    shape: AttentionShape,
    dtype: Dtype,
    inputs: Inputs,
}

/// Attention on CUDA device 0.
pub struct CudaBackend {
    dev: CudaDevice,
    loaded: Option<Loaded>,
}

/// The CUDA backend, or why this machine cannot run it.
pub fn new() -> anyhow::Result<Box<dyn AttentionBenchBackend>> {
    let dev = CudaDevice::open(0).context("CUDA backend unavailable")?;
    tracing::info!(device = %dev.name, arch = %dev.arch, "CUDA bench backend");
    Ok(Box::new(CudaBackend { dev, loaded: None }))
}

fn to_bits(x: &[f32], dtype: Dtype) -> anyhow::Result<Vec<u16>> {
    Ok(match dtype {
        Dtype::Bf16 => x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect(),
        Dtype::F16 => x.iter().map(|&v| f16::from_f32(v).to_bits()).collect(),
        Dtype::F32 => anyhow::bail!("the CUDA attention routes store f16 or bf16, not f32"),
    })
}

impl AttentionBenchBackend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn load(
        &mut self,
        shape: &AttentionShape,
        dtype: Dtype,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> anyhow::Result<()> {
        shape.validate_buffers(q.len(), k.len(), v.len(), q.len())?;
        self.loaded = None; // free the previous inputs first
        let inputs = Inputs {
            q: self.dev.upload(&to_bits(q, dtype)?)?,
            k: self.dev.upload(&to_bits(k, dtype)?)?,
            v: self.dev.upload(&to_bits(v, dtype)?)?,
            out: self.dev.alloc(q.len() * dtype.size_bytes())?,
        };
        self.loaded = Some(Loaded {
            shape: *shape,
            dtype,
            inputs,
        });
        Ok(())
    }

    fn run(&mut self, route: RouteRequest) -> anyhow::Result<(f64, AttentionReport)> {
        let l = self.loaded.as_ref().context("run before load")?;
        self.dev.fill_bytes(&l.inputs.out, 0xFF)?;
        let (ms, report) = time_once(&self.dev, &l.shape, l.dtype, route, &l.inputs.buffers())?;
        Ok((ms, report))
    }

    fn output(&mut self) -> anyhow::Result<Vec<f32>> {
        let l = self.loaded.as_ref().context("output before load")?;
        let mut bits = vec![0u16; l.shape.q_elems()];
        self.dev.read(&l.inputs.out, &mut bits)?;
        Ok(match l.dtype {
            Dtype::Bf16 => bits
                .into_iter()
                .map(|b| bf16::from_bits(b).to_f32())
                .collect(),
            _ => bits
                .into_iter()
                .map(|b| f16::from_bits(b).to_f32())
                .collect(),
        })
    }
}
