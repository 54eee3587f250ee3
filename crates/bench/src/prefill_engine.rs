//! [`PrefillTarget`] through the engine's scheduler (`path = "engine"` in
//! the JSON): the path `headroom generate` and `headroom serve` run. The
//! engine owns the model; each arm's routes are set on the engine
//! ([`EngineCore::set_attention`], while idle) and each prompt is submitted
//! as a greedy request of one token and stepped by the scheduler (chunked
//! under its settings) until it finishes. TTFT is the engine's own
//! measure, submission to the first drawn token (`Usage::ttft_ms`); the
//! routes come back from the attention reports the request's calls made
//! (`StreamEvent::Finished::attention`), never from what was set.

use crate::prefill_schema::{KvRecord, SchedulerRecord};
use crate::prefill_target::{PrefillRun, PrefillTarget};
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_core::{BackendKind, LayerKind, RouteRequest};
use headroom_engine::{
    EngineConfig, EngineCore, GenerateRequest, KvBackendKind, SchedulerSettings, StreamEvent,
};
use headroom_model::{AttentionPlan, Qwen35Model};

/// How the bench's engine is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineBenchSettings {
    pub scheduler: SchedulerSettings,
    pub kv_backend: KvBackendKind,
    /// Most tokens of one request: at least the longest prompt + 1.
    pub max_context: usize,
}

impl EngineBenchSettings {
    /// The scheduler's defaults and contiguous KV, sized for prompts up to `longest`.
    pub fn for_longest(longest: usize) -> EngineBenchSettings {
        EngineBenchSettings {
            scheduler: SchedulerSettings::default(),
            kv_backend: KvBackendKind::Contiguous,
            max_context: context_for(longest),
        }
    }
}

/// Context for prompts up to `longest` tokens plus the drawn one, rounded up to 64.
pub fn context_for(longest: usize) -> usize {
    longest
        .saturating_add(1)
        .div_ceil(64)
        .max(1)
        .saturating_mul(64)
}

/// The engine, one request at a time.
pub struct EnginePrefill<B: Backend> {
    core: EngineCore<B>,
    /// The routes set on the engine by the last prefill (`None`: not yet).
    set: Option<Vec<(usize, RouteRequest)>>,
}

impl<B: Backend> EnginePrefill<B> {
    /// Builds the engine over `model` (one running request; no memory budget).
    pub fn new(model: Qwen35Model<B>, s: EngineBenchSettings) -> anyhow::Result<Self> {
        let cfg = EngineConfig {
            scheduler: s.scheduler,
            kv_backend: s.kv_backend,
            max_running: 1,
            max_context: s.max_context,
            max_waiting: 1,
            // A prefill benchmark repeats its prompts: every run computes them.
            prefix_cache: headroom_engine::PrefixCacheSettings::off(),
            ..EngineConfig::default()
        };
        let core = EngineCore::new(model, cfg).context("building the engine")?;
        Ok(EnginePrefill { core, set: None })
    }

    /// The engine (its routes, stats, configuration).
    pub fn core(&self) -> &EngineCore<B> {
        &self.core
    }
}

impl<B: Backend> PrefillTarget for EnginePrefill<B> {
    fn backend(&self) -> BackendKind {
        self.core.model().backend().kind()
    }

    fn layer_kinds(&self) -> Vec<LayerKind> {
        self.core.model().config().layer_kinds()
    }

    fn vocab_size(&self) -> usize {
        self.core.model().vocab_size()
    }

    fn path(&self) -> &'static str {
        "engine"
    }

    fn scheduler(&self) -> SchedulerRecord {
        let cfg = self.core.config();
        let s = cfg.scheduler;
        SchedulerRecord {
            path: self.path().to_string(),
            prefill_chunk: Some(s.prefill_chunk),
            step_tokens: Some(s.step_tokens),
            solo_stripe: Some(self.core.solo_stripe().tokens),
            solo_stripe_reason: Some(format!(
                "{} → {} ({:?}): {}",
                self.core.solo_stripe().requested,
                self.core.solo_stripe().tokens,
                self.core.solo_stripe().bound,
                self.core.solo_stripe().reason
            )),
            solo_chunk: Some(s.max_chunk(true, self.core.solo_stripe().tokens)),
            max_batch_sequences: cfg.max_running,
            max_tokens: 1,
            steps_to_first_token: 0,
        }
    }

    fn kv(&self) -> KvRecord {
        let kv = self.core.kv();
        KvRecord {
            requested: kv.requested.to_string(),
            resolved: kv.resolved.to_string(),
            fallback_reason: kv.reason.clone(),
        }
    }

    fn prefill(
        &mut self,
        ids: &[u32],
        routes: &[(usize, RouteRequest)],
    ) -> anyhow::Result<PrefillRun> {
        if self.set.as_deref() != Some(routes) {
            self.core
                .set_attention(AttentionPlan::PerLayer(routes.to_vec()))
                .context("setting the arm's routes on the engine")?;
            self.set = Some(routes.to_vec());
        }
        let be = self.core.model().backend();
        be.synchronize().context("synchronize")?;
        let before = be.memory().0 as u64;
        be.reset_peak_memory();
        let mut stream = self
            .core
            .submit(GenerateRequest::greedy(ids.to_vec(), 1))
            .map_err(|e| anyhow::anyhow!("the engine refused the prompt: {e}"))?;
        let mut steps = 0usize;
        while self.core.step().context("engine step")?.is_some() {
            steps += 1;
        }
        let be = self.core.model().backend();
        let peak = be.memory().1 as u64;
        let mut finished = None;
        while let Some(e) = stream.try_next() {
            match e {
                StreamEvent::Logprobs(_) => {}
                StreamEvent::Token(_) => {}
                StreamEvent::Finished {
                    usage, attention, ..
                } => finished = Some((usage, attention)),
                StreamEvent::Error(why) => bail!("the engine failed the request: {why}"),
            }
        }
        let Some((usage, attention)) = finished else {
            bail!("the request did not finish after {steps} engine steps");
        };
        if usage.completion_tokens != 1 {
            bail!(
                "the request drew {} tokens, expected 1",
                usage.completion_tokens
            );
        }
        Ok(PrefillRun {
            ttft_ms: usage.ttft_ms,
            attention,
            backend_before_bytes: before,
            backend_peak_bytes: peak,
            process_peak_rss_bytes: 0,
            steps,
        })
    }
}
