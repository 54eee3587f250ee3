//! Shared test fixtures: a fake [`PrefillTarget`] that reports what it ran
//! (as the `model.prefill` path: its scheduler and KV records), and the
//! validator's verdict on one bench file.
#![allow(dead_code)]

use headroom_bench::prefill::{self, Arm, PrefillConfig};
use headroom_bench::prefill_model;
use headroom_bench::prefill_schema::{KvRecord, PrefillBenchFile, SchedulerRecord};
use headroom_bench::prefill_target::{AttentionRun, PrefillRun, PrefillTarget};
use headroom_bench::validate::{validate_files, ValidateOptions};
use headroom_core::{AttentionKind, BackendKind, Dtype, LayerKind, Route, RouteRequest};
use headroom_policy::Registry;

pub fn kinds() -> Vec<LayerKind> {
    let lin = LayerKind {
        attention: AttentionKind::Linear,
        head_dim: 128,
        q_heads: 4,
        kv_heads: 4,
        dtype: Dtype::F32,
    };
    let full = LayerKind {
        attention: AttentionKind::Full,
        head_dim: 256,
        q_heads: 4,
        kv_heads: 2,
        dtype: Dtype::F32,
    };
    vec![lin, full, lin, full]
}

/// Reports running what it was asked, unless `lie` rewrites the route.
pub struct Fake {
    pub lie: Option<RouteRequest>,
    /// ms per token for composed qL (by block) and fused.
    pub speed: fn(RouteRequest) -> f64,
    pub calls: usize,
}

pub fn flat(_: RouteRequest) -> f64 {
    0.01
}

impl Fake {
    pub fn honest() -> Fake {
        Fake {
            lie: None,
            speed: flat,
            calls: 0,
        }
    }
}

impl PrefillTarget for Fake {
    fn backend(&self) -> BackendKind {
        BackendKind::Cpu
    }
    fn layer_kinds(&self) -> Vec<LayerKind> {
        kinds()
    }
    fn vocab_size(&self) -> usize {
        100
    }
    fn path(&self) -> &'static str {
        "model.prefill"
    }
    fn scheduler(&self) -> SchedulerRecord {
        prefill_model::scheduler_record()
    }
    fn kv(&self) -> KvRecord {
        prefill_model::kv_record()
    }
    fn prefill(
        &mut self,
        ids: &[u32],
        routes: &[(usize, RouteRequest)],
    ) -> anyhow::Result<PrefillRun> {
        self.calls += 1;
        let attention = routes
            .iter()
            .map(|&(layer, r)| {
                let r = self.lie.unwrap_or(r);
                let (route, query_block) = match r {
                    RouteRequest::Fused => (Route::Fused, None),
                    RouteRequest::Composed { query_block } => (
                        Route::Composed,
                        Some(if query_block == 0 {
                            ids.len()
                        } else {
                            query_block.min(ids.len())
                        }),
                    ),
                };
                AttentionRun {
                    layer,
                    route,
                    query_block,
                    transient_bytes: 1000 * query_block.unwrap_or(1) as u64,
                    calls: 1,
                }
            })
            .collect();
        let speed = (self.speed)(routes[0].1);
        // Small deterministic jitter so spreads are not zero.
        let jitter = 1.0 + 0.001 * (self.calls % 3) as f64;
        Ok(PrefillRun {
            ttft_ms: speed * ids.len() as f64 * jitter,
            attention,
            backend_before_bytes: 1 << 20,
            backend_peak_bytes: 2 << 20,
            process_peak_rss_bytes: 0,
            steps: 1,
        })
    }
}

pub fn arms(list: &str) -> Vec<Arm> {
    list.split(',').map(|a| a.parse().unwrap()).collect()
}

pub fn bench(target: &mut dyn PrefillTarget, list: &str, lengths: &[usize]) -> PrefillBenchFile {
    let cfg = PrefillConfig {
        arms: arms(list),
        lengths: lengths.to_vec(),
        warmup: 1,
        iterations: 3,
        seed: 1,
        model_source: "synthetic:fake".into(),
    };
    prefill::run(
        &cfg,
        target,
        headroom_hardware::detect_cpu(),
        &Registry::default(),
    )
    .unwrap()
}

/// The validator's messages on `f` alone (default options).
pub fn validation_messages(f: &PrefillBenchFile) -> Vec<String> {
    let files = [("f".into(), serde_json::to_vec(f).unwrap())];
    validate_files(&files, ValidateOptions::default()).1
}
