//! Running `headroom generate`'s requests through an engine on the built
//! model (one model or a tensor-parallel group): the engine's warm-up first
//! (`headroom_engine::warmup`, as `serve` runs it: the kernels' first use,
//! compilation or the disk cache, timed apart from the prefill), then every
//! request, the single one streamed to stdout token
//! by token, many printed as each completes.

use super::report::{self, Outcome, RunInfo, Timings};
use crate::backend_select::{LoadInfo, ModelJob};
use crate::cmd::logits::available_memory_bytes;
use crate::tp::{GroupInfo, GroupJob};
use crate::warmup_mode::WarmupMode;
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_engine::{EngineConfig, EngineHandle, GenerateRequest, RequestStream, StreamEvent};
use headroom_model::tokenizer::{StreamDecoder, TextCodec};
use headroom_model::{Qwen35Model, StepModel, TpGroup};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Runs every request through an engine on the built model.
pub(super) struct GenerateJob {
    pub requests: Vec<GenerateRequest>,
    pub engine: EngineConfig,
    pub codec: TextCodec,
    pub json: Option<PathBuf>,
    pub single: bool,
    /// What ran, for the "ran" line: the model and its layers' attention in words.
    pub model: String,
    pub attention: String,
    /// `--batch-invariant` (reported in the summary).
    pub batch_invariant: bool,
}

impl ModelJob for GenerateJob {
    type Output = ();

    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<()> {
        let info = RunInfo {
            backend: info.backend,
            open_seconds: Some(info.open_seconds),
            load_seconds: info.load_seconds,
            weight_bytes: vec![info.weight_bytes],
            batch_invariant: self.batch_invariant,
        };
        self.run_engine(model, &info)
    }
}

impl GroupJob for GenerateJob {
    type Output = ();

    fn run<B: Backend + 'static>(self, group: TpGroup<B>, info: &GroupInfo) -> anyhow::Result<()> {
        let info = RunInfo {
            backend: info.backend,
            open_seconds: None,
            load_seconds: info.load_seconds,
            weight_bytes: info.weight_bytes.clone(),
            batch_invariant: self.batch_invariant,
        };
        self.run_engine(group, &info)
    }
}

impl GenerateJob {
    /// Runs every request through an engine on `model` (one model or a group).
    fn run_engine<B: Backend + 'static, M: StepModel<B> + 'static>(
        self,
        model: M,
        info: &RunInfo,
    ) -> anyhow::Result<()> {
        let mut engine = self.engine.clone();
        let world = info.weight_bytes.len().max(1) as u64;
        if engine.memory_budget_bytes.is_none() && info.backend == BackendKind::Cpu {
            engine.memory_budget_bytes = available_memory_bytes().map(|b| b / 10 * 9 / world);
        }
        let handle = headroom_engine::spawn(model, engine).context("starting the engine")?;
        let ran = report::ran_line(
            &self.model,
            &self.attention,
            self.engine.max_context,
            &handle.stats(),
            info,
        );
        eprintln!("{ran}");
        let warmup = Instant::now();
        // serve's warm-up (`--warmup auto`: on a GPU only): a full prefill
        // step and decode batches, forgotten after.
        if WarmupMode::Auto.runs_on(info.backend) {
            match headroom_engine::warmup::warm_up(&handle) {
                Ok(r) => tracing::info!("{r}"),
                Err(e) => tracing::warn!(
                    "{e}; the first request's prefill includes the kernels' first use"
                ),
            }
        }
        let warmup_seconds = warmup.elapsed().as_secs_f64();
        let started = Instant::now();
        let (mut streams, mut outcomes) = self.submit_all(&handle)?;
        if self.single {
            if let Some(s) = streams[0].as_mut() {
                stream_one(s, &self.codec, &mut outcomes[0])?;
            }
        } else {
            collect_all(&mut streams, &mut outcomes, &self.codec)?;
        }
        let wall = started.elapsed().as_secs_f64();
        // Asked of the loop (answered between steps), not the copy it leaves
        // after each step: a stream can end inside a step, before that copy.
        let stats = handle
            .current_stats()
            .context("reading the engine's counters after the run")?;
        handle.shutdown_and_wait();
        let timings = Timings {
            warmup_seconds,
            wall_seconds: wall,
        };
        eprintln!(
            "{}",
            report::timing_line(&self.requests, &outcomes, info, &timings, self.single)?
        );
        if let Some(path) = &self.json {
            let summary = report::summary(&outcomes, &timings, &stats, info);
            report::write_json(path, &outcomes, &self.codec, &summary)?;
        }
        Ok(())
    }

    /// Submits every request in one command (`submit_each`), so the engine
    /// plans them from its first step and the run's schedule, and tokens,
    /// are the same run to run; a refusal fails a single request and is
    /// recorded as that request's error among many.
    #[allow(clippy::type_complexity)]
    fn submit_all(
        &self,
        handle: &EngineHandle,
    ) -> anyhow::Result<(Vec<Option<RequestStream>>, Vec<Outcome>)> {
        let mut streams = Vec::new();
        let mut outcomes = Vec::new();
        for submitted in handle.submit_each(self.requests.clone()) {
            match submitted {
                Ok(s) => {
                    streams.push(Some(s));
                    outcomes.push(Outcome::default());
                }
                Err(e) if self.single => bail!("{e}"),
                Err(e) => {
                    streams.push(None);
                    outcomes.push(Outcome {
                        error: Some(e.to_string()),
                        ..Outcome::default()
                    });
                }
            }
        }
        Ok((streams, outcomes))
    }
}

/// Streams one request's text to stdout as tokens arrive.
fn stream_one(s: &mut RequestStream, codec: &TextCodec, o: &mut Outcome) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut text = StreamDecoder::new();
    while let Some(e) = s.blocking_next() {
        if let StreamEvent::Token(t) = &e {
            let piece = crate::output::escape_generated(&text.push(codec, *t)?);
            write!(stdout, "{piece}")
                .and_then(|()| stdout.flush())
                .context("writing to stdout")?;
        }
        if apply(o, e) {
            break;
        }
    }
    let tail = crate::output::escape_generated(&text.finish(codec)?);
    writeln!(stdout, "{tail}")
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    if let Some(e) = &o.error {
        bail!("{e}");
    }
    Ok(())
}

/// Applies an event; true when it ended the request.
fn apply(o: &mut Outcome, e: StreamEvent) -> bool {
    match e {
        StreamEvent::Token(t) => {
            o.ids.push(t);
            false
        }
        StreamEvent::Logprobs(_) => false,
        StreamEvent::Finished { reason, usage, .. } => {
            o.reason = Some(reason);
            o.usage = Some(usage);
            true
        }
        StreamEvent::Error(e) => {
            o.error = Some(e);
            true
        }
    }
}

/// Polls every stream until all requests ended; prints each text as it completes.
fn collect_all(
    streams: &mut [Option<RequestStream>],
    outcomes: &mut [Outcome],
    codec: &TextCodec,
) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    loop {
        let mut progressed = false;
        let mut open = 0;
        for (i, slot) in streams.iter_mut().enumerate() {
            let Some(s) = slot.as_mut() else { continue };
            open += 1;
            while let Some(e) = s.try_next() {
                progressed = true;
                if apply(&mut outcomes[i], e) {
                    let o = &outcomes[i];
                    let tag = o.reason.map_or("error", |r| r.as_str());
                    let text = crate::output::escape_generated(&codec.decode(&o.ids)?);
                    writeln!(stdout, "[{i}] ({tag}) {text}").context("writing to stdout")?;
                    *slot = None;
                    break;
                }
            }
        }
        if open == 0 {
            return Ok(());
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
