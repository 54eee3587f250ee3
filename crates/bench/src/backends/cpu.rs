//! The CPU attention bench backend: inputs stored in the bench dtype, routes
//! run by `headroom_attention_cpu::attention_prefill`, wall-clock timing.

use crate::backend::AttentionBenchBackend;
use anyhow::Context;
use half::{bf16, f16};
use headroom_attention_cpu::attention_prefill;
use headroom_core::{AttentionReport, AttentionShape, Dtype, Element, RouteRequest};
use std::time::Instant;

/// Inputs and output in one storage dtype.
struct Buffers<T> {
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    out: Vec<T>,
}

impl<T: Element> Buffers<T> {
    fn new(shape: &AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Self {
        let conv = |x: &[f32]| x.iter().map(|&f| T::from_f32(f)).collect();
        Buffers {
            q: conv(q),
            k: conv(k),
            v: conv(v),
            out: vec![T::from_f32(f32::NAN); shape.q_elems()],
        }
    }

    fn run(
        &mut self,
        shape: &AttentionShape,
        route: RouteRequest,
    ) -> anyhow::Result<(f64, AttentionReport)> {
        self.out.fill(T::from_f32(f32::NAN));
        let t = Instant::now();
        let report = attention_prefill(shape, route, &self.q, &self.k, &self.v, &mut self.out)?;
        Ok((t.elapsed().as_secs_f64() * 1e3, report))
    }

    fn output(&self) -> Vec<f32> {
        self.out.iter().map(|x| x.to_f32()).collect()
    }
}

enum Loaded {
    F32(Buffers<f32>),
    F16(Buffers<f16>),
    Bf16(Buffers<bf16>),
}

/// Runs on the current rayon pool (all cores unless `RAYON_NUM_THREADS` says otherwise).
#[derive(Default)]
pub struct CpuBackend {
    loaded: Option<(AttentionShape, Loaded)>,
}

impl AttentionBenchBackend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn load(
        &mut self,
        shape: &AttentionShape,
        dtype: Dtype,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> anyhow::Result<()> {
        shape.validate_buffers(q.len(), k.len(), v.len(), shape.q_elems())?;
        let loaded = match dtype {
            Dtype::F32 => Loaded::F32(Buffers::new(shape, q, k, v)),
            Dtype::F16 => Loaded::F16(Buffers::new(shape, q, k, v)),
            Dtype::Bf16 => Loaded::Bf16(Buffers::new(shape, q, k, v)),
        };
        self.loaded = Some((*shape, loaded));
        Ok(())
    }

    fn run(&mut self, route: RouteRequest) -> anyhow::Result<(f64, AttentionReport)> {
        let (shape, loaded) = self
            .loaded
            .as_mut()
            .context("cpu backend: run before load")?;
        match loaded {
            Loaded::F32(b) => b.run(shape, route),
            Loaded::F16(b) => b.run(shape, route),
            Loaded::Bf16(b) => b.run(shape, route),
        }
    }

    fn output(&mut self) -> anyhow::Result<Vec<f32>> {
        let (_, loaded) = self
            .loaded
            .as_ref()
            .context("cpu backend: output before load")?;
        Ok(match loaded {
            Loaded::F32(b) => b.output(),
            Loaded::F16(b) => b.output(),
            Loaded::Bf16(b) => b.output(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_what_it_loaded_and_reports_the_route() {
        let shape = AttentionShape {
            q_len: 5,
            kv_len: 7,
            q_heads: 2,
            kv_heads: 1,
            head_dim: 64,
            scale: None,
        };
        let q: Vec<f32> = (0..shape.q_elems()).map(|i| (i % 7) as f32 * 0.1).collect();
        let kv: Vec<f32> = (0..shape.kv_elems())
            .map(|i| (i % 5) as f32 * 0.2)
            .collect();
        let mut b = CpuBackend::default();
        assert!(b.run(RouteRequest::Fused).is_err(), "run before load");
        b.load(&shape, Dtype::Bf16, &q, &kv, &kv).unwrap();
        let (ms, report) = b.run(RouteRequest::Composed { query_block: 2 }).unwrap();
        assert!(ms >= 0.0);
        assert_eq!(report.query_block, Some(2));
        let out = b.output().unwrap();
        assert_eq!(out.len(), shape.q_elems());
        assert!(out.iter().all(|x| x.is_finite()));
        assert!(
            b.load(&shape, Dtype::F32, &q[1..], &kv, &kv).is_err(),
            "short q refused"
        );
    }
}
