//! [`PrefillTarget`] over the model's own one-sequence prefill
//! (`Qwen35Model::prefill`, labelled `path = "model.prefill"` in the JSON):
//! a fresh session per prompt, the whole prompt in one pass, logits of the
//! last row only, greedy first token; the attention calls come back as the
//! forward's `LayerAttentionReport`s. A reference path for tests and
//! comparisons: `bench prefill` and `qualify` run the engine
//! ([`crate::prefill_engine`]). [`scheduler_record`] and [`kv_record`] are
//! what this path reports (and what the tests' fake target reports as it).

use crate::prefill_schema::{KvRecord, SchedulerRecord};
use crate::prefill_target::{AttentionRun, PrefillRun, PrefillTarget};
use anyhow::Context;
use headroom_core::ops::Backend;
use headroom_core::{BackendKind, LayerKind, RouteRequest};
use headroom_model::qwen3_5::LayerAttentionReport;
use headroom_model::{AttentionPlan, ForwardOptions, LogitsRows, Qwen35Model};
use std::time::Instant;

/// The model, driven through `prefill`.
pub struct ModelPrefill<B: Backend> {
    pub model: Qwen35Model<B>,
}

/// The scheduler record of `model.prefill`: one sequence, the whole prompt
/// in one pass, one step to the first token.
pub fn scheduler_record() -> SchedulerRecord {
    SchedulerRecord {
        path: "model.prefill".into(),
        prefill_chunk: None,
        step_tokens: None,
        solo_stripe: None,
        solo_stripe_reason: None,
        solo_chunk: None,
        max_batch_sequences: 1,
        max_tokens: 1,
        steps_to_first_token: 1,
    }
}

/// The KV record of `model.prefill`: the default request, contiguous slots.
pub fn kv_record() -> KvRecord {
    KvRecord {
        requested: "default".into(),
        resolved: "contiguous-slots".into(),
        fallback_reason: None,
    }
}

/// The attention calls of a forward, as reported.
pub fn runs_from_reports(reports: &[LayerAttentionReport]) -> Vec<AttentionRun> {
    reports
        .iter()
        .map(|r| AttentionRun {
            layer: r.layer,
            route: r.report.route,
            query_block: r.report.query_block,
            transient_bytes: r.report.transient_bytes,
            calls: 1,
        })
        .collect()
}

impl<B: Backend> PrefillTarget for ModelPrefill<B> {
    fn backend(&self) -> BackendKind {
        self.model.backend().kind()
    }

    fn layer_kinds(&self) -> Vec<LayerKind> {
        self.model.config().layer_kinds()
    }

    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }

    fn path(&self) -> &'static str {
        "model.prefill"
    }

    fn scheduler(&self) -> SchedulerRecord {
        scheduler_record()
    }

    fn kv(&self) -> KvRecord {
        kv_record()
    }

    fn prefill(
        &mut self,
        ids: &[u32],
        routes: &[(usize, RouteRequest)],
    ) -> anyhow::Result<PrefillRun> {
        let be = self.model.backend();
        let mut session = self
            .model
            .new_session_with_capacity(ids.len() + 1)
            .context("allocating the session")?;
        be.synchronize().context("synchronize")?;
        let before = be.memory().0 as u64;
        be.reset_peak_memory();
        let opts = ForwardOptions {
            attention: AttentionPlan::PerLayer(routes.to_vec()),
            chunk: None,
            logits: LogitsRows::Last,
        };
        let started = Instant::now();
        let out = self
            .model
            .prefill(&mut session, ids, &opts)
            .context("prefill")?;
        let first = argmax(&out.logits);
        let ttft_ms = started.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(first.is_some(), "the prefill returned no logits");
        Ok(PrefillRun {
            ttft_ms,
            attention: runs_from_reports(&out.attention),
            backend_before_bytes: before,
            backend_peak_bytes: be.memory().1 as u64,
            process_peak_rss_bytes: 0,
            steps: 1,
        })
    }
}

fn argmax(xs: &[f32]) -> Option<usize> {
    xs.iter()
        .enumerate()
        .filter(|(_, x)| !x.is_nan())
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
}
