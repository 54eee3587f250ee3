//! The step overlap's mechanics ([`crate::overlap`]): a step queued and not
//! yet read ([`InFlight`]); [`EngineCore::step_overlapped`] plans and
//! queues the next step while one is in flight — its decode rows take the
//! in-flight step's tokens where they were drawn — and only then reads the
//! in-flight step's tokens and streams them.
//!
//! Order of the host's work, so that the device sees the same sequence of
//! state updates as without the overlap:
//! * a step's progress (block names, prefix-cache snapshots: `note_progress`)
//!   is noted before the next step is queued: at once for rows whose input
//!   tokens were known, after the read of the step before for decode rows
//!   fed one of its tokens (snapshots are taken at prefill points only);
//! * a planning that could preempt (fewer free KV blocks than the step
//!   could take) or that needs tokens on the host (penalties, log probabilities)
//!   reads the in-flight step first: no sequence leaves the running set
//!   with a token in flight;
//! * a sequence that ends at step k by a stop token has one more row in
//!   step k + 1 (its output dropped): it retires without an end snapshot,
//!   since that row updates its state first. A `max_tokens` end is known
//!   when planning and takes no row. With no request left, forgetting or
//!   re-routing reads that last step first (`drain_finished`).

use super::run::Packed;
use super::EngineCore;
use crate::kv::{blocks_for, KvBackendKind, KV_BLOCK_ROWS};
use crate::report::StepReport;
use crate::EngineError;
use headroom_core::ops::{Backend, Batch};
use headroom_model::{LogitsRows, StepIds, StepModel};
use std::collections::HashMap;
use std::time::Instant;

/// A step queued whose tokens were not read yet.
pub(crate) struct InFlight<D> {
    /// Its number (`EngineCore::launched` when it was queued).
    number: u64,
    /// The sequence of each drawn row, in the order of the draw.
    draws: Vec<u64>,
    /// Where its tokens were drawn (none when no row draws).
    drawn: Option<D>,
    /// Sequences whose decode row took a token of the step before it, with
    /// their rows before this step: their progress is noted once that
    /// token is read.
    fed: Vec<(u64, usize)>,
    report: StepReport,
    started: Instant,
    queued: Instant,
}

/// What queueing a step gave.
enum Launched<D> {
    Flying(InFlight<D>),
    /// The forward or the draw failed; the step's sequences were failed.
    Failed(StepReport),
}

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    /// One call of [`EngineCore::step`] with the overlap on.
    pub(super) fn step_overlapped(
        &mut self,
        started: Instant,
    ) -> Result<Option<StepReport>, EngineError> {
        if self.needs_host_draws() {
            // Its rows draw on the host: the step before is read first and
            // this one runs without the overlap.
            if let Some(prev) = self.inflight.take() {
                return self.land(prev).map(Some);
            }
            let Some(plan) = self.plan_step()? else {
                return Ok(None);
            };
            return self.run_plan(&plan, started).map(Some);
        }
        if self.inflight.is_none() {
            let Some(plan) = self.plan_step()? else {
                return Ok(None);
            };
            match self.launch(&plan, started)? {
                Launched::Flying(f) => self.inflight = Some(f),
                Launched::Failed(report) => return Ok(Some(report)),
            }
        }
        let next = match self.may_plan_ahead() {
            true => match self.plan_step()? {
                Some(plan) => match self.launch(&plan, Instant::now())? {
                    Launched::Flying(f) => {
                        self.stats.steps_queued_ahead += 1;
                        Some(f)
                    }
                    Launched::Failed(_) => None,
                },
                None => None,
            },
            false => None,
        };
        let prev = std::mem::replace(&mut self.inflight, next)
            .ok_or_else(|| EngineError::Internal("no step in flight to read".into()))?;
        let report = self.land(prev)?;
        self.note_fed()?;
        Ok(Some(report))
    }

    /// Whether a running or waiting sequence draws its tokens on the host.
    fn needs_host_draws(&self) -> bool {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .any(|s| s.extras.on_host())
    }

    /// Whether the next step may be planned with a step in flight: its
    /// planning cannot preempt. Only the growth of running sequences can
    /// (an admission takes blocks counted free): a decode row takes a new
    /// block where its sequence's blocks are full, and a sequence given n
    /// prefill rows at most n / 64 + 1, n summing to at most the step's
    /// budget of the running sequences' remaining prompts (paged KV;
    /// contiguous KV never preempts).
    fn may_plan_ahead(&self) -> bool {
        if self.kv.resolved != KvBackendKind::Paged {
            return true;
        }
        let (mut decode_blocks, mut prompts, mut prefilling) = (0usize, 0usize, 0usize);
        for s in &self.running {
            if s.decodes_next() {
                decode_blocks += blocks_for(s.processed + 1).saturating_sub(s.blocks.len());
            }
            let rem = s.remaining_prompt();
            if rem > 0 {
                prompts = prompts.saturating_add(rem);
                prefilling += 1;
            }
        }
        let bound = prompts
            .min(self.step_budget().left())
            .div_ceil(KV_BLOCK_ROWS)
            .saturating_add(prefilling)
            .saturating_add(decode_blocks);
        self.blocks.free() >= bound
    }

    /// Queues `plan` (forward and draw, nothing read): decode rows of
    /// sequences whose last token is in flight take it from there.
    fn launch(
        &mut self,
        plan: &[(usize, usize)],
        started: Instant,
    ) -> Result<Launched<B::Drawn>, EngineError> {
        let number = self.launched + 1;
        let flying = self.inflight.as_ref().map(|f| f.number);
        let mut ids = Vec::new();
        let mut holes = Vec::new();
        let mut fed = Vec::new();
        let mut is_fed = vec![false; plan.len()];
        let mut bad = None;
        let Packed {
            batch,
            draws,
            mut report,
        } = self.pack(plan, &mut ids, |k, s, n, ids| match s.feed {
            Some((step, row)) if s.remaining_prompt() == 0 => {
                if Some(step) != flying || n != 1 {
                    bad = Some(format!(
                        "request {}: {n} rows fed from step {step}, in flight {flying:?}",
                        s.id
                    ));
                }
                holes.push((ids.len(), row));
                ids.push(0);
                fed.push((s.id, s.processed));
                is_fed[k] = true;
            }
            _ => s.push_inputs(n, ids),
        });
        if let Some(why) = bad {
            return Err(EngineError::Internal(why));
        }
        let queued = Instant::now();
        let drawn = match self.queue_forward(plan, &ids, &holes, &batch, &draws, &mut report) {
            Ok(d) => d,
            Err(e) => {
                self.fail_plan(plan, &e.to_string());
                report.total_s = started.elapsed().as_secs_f64();
                return Ok(Launched::Failed(report));
            }
        };
        self.launched = number;
        let draw_ids: Vec<u64> = draws.iter().map(|&k| self.running[plan[k].0].id).collect();
        for (row, &k) in draws.iter().enumerate() {
            self.running[plan[k].0].feed = Some((number, row));
        }
        for (&(i, n), fed) in plan.iter().zip(is_fed) {
            let before = self.running[i].processed;
            self.running[i].processed += n;
            if !fed {
                self.note_progress(i, before)?;
            }
        }
        Ok(Launched::Flying(InFlight {
            number,
            draws: draw_ids,
            drawn,
            fed,
            report,
            started,
            queued,
        }))
    }

    /// The forward of `batch` and the draw of rows `draws` (of `plan`),
    /// queued; the attention reports noted.
    fn queue_forward(
        &mut self,
        plan: &[(usize, usize)],
        ids: &[u32],
        holes: &[(usize, usize)],
        batch: &Batch,
        draws: &[usize],
        report: &mut StepReport,
    ) -> Result<Option<B::Drawn>, EngineError> {
        let queue_started = Instant::now();
        let drawn_before = self.inflight.as_ref().and_then(|f| f.drawn.as_ref());
        let step_ids = match (holes.is_empty(), drawn_before) {
            (true, _) => StepIds::known(ids),
            (false, Some(d)) => StepIds {
                ids,
                drawn: Some((holes, d)),
            },
            (false, None) => {
                return Err(EngineError::Internal(
                    "a decode row waits for a token that no step in flight drew".into(),
                ))
            }
        };
        let out = self.model.step_drawn(
            &mut self.state,
            step_ids,
            batch,
            &self.routes,
            LogitsRows::Last,
        )?;
        report.queue_s = queue_started.elapsed().as_secs_f64();
        self.note_attention_reports(plan, &out.attention, report);
        if draws.is_empty() {
            return Ok(None);
        }
        let logits = out
            .logits
            .ok_or_else(|| EngineError::Internal("a step asked for logits returned none".into()))?;
        let (rows, params, steps) = self.draw_inputs(plan, draws, logits)?;
        let be = self.model.lead().backend();
        Ok(Some(be.sample_later(&rows, &params, &steps)?))
    }

    /// Reads step `f`'s tokens, streams them and retires the sequences they
    /// end; its report.
    fn land(&mut self, f: InFlight<B::Drawn>) -> Result<StepReport, EngineError> {
        let mut report = f.report;
        let tokens = match &f.drawn {
            Some(d) => self.model.lead().backend().read_drawn(d),
            None => Ok(Vec::new()),
        };
        report.forward_s = f.queued.elapsed().as_secs_f64();
        self.stats.steps += 1;
        let index = self.running_index();
        let tokens = match tokens {
            Ok(t) if t.len() == f.draws.len() => t,
            Ok(t) => {
                return Err(EngineError::Internal(format!(
                    "{} tokens read for {} drawn rows",
                    t.len(),
                    f.draws.len()
                )))
            }
            Err(e) => {
                // Its sequences still running fail, as after a failed forward.
                let plan: Vec<(usize, usize)> = report
                    .sequences
                    .iter()
                    .filter_map(|&(id, n)| index.get(&id).map(|&i| (i, n)))
                    .collect();
                self.fail_plan(&plan, &e.to_string());
                report.total_s = f.started.elapsed().as_secs_f64();
                return Ok(report);
            }
        };
        let mut finished = Vec::new();
        for (&id, token) in f.draws.iter().zip(tokens) {
            // A sequence failed or cancelled since has no row here.
            let Some(&i) = index.get(&id) else {
                continue;
            };
            let s = &mut self.running[i];
            if s.feed.is_some_and(|(n, _)| n == f.number) {
                s.feed = None;
            }
            if let Some(reason) = self.accept_token(i, (token, None, None), &mut report) {
                finished.push((i, reason));
            }
        }
        finished.sort_unstable_by_key(|f| std::cmp::Reverse(f.0));
        for (i, reason) in finished {
            let id = self.running[i].id;
            let has_row_in_flight = self
                .inflight
                .as_ref()
                .is_some_and(|g| g.report.sequences.iter().any(|r| r.0 == id));
            self.retire_with(i, reason, !has_row_in_flight);
        }
        report.total_s = f.started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Notes the progress of the in-flight step's decode rows that took a
    /// token of the step just read (their inputs are known now).
    fn note_fed(&mut self) -> Result<(), EngineError> {
        let fed = match &self.inflight {
            Some(f) if !f.fed.is_empty() && self.caching() => f.fed.clone(),
            _ => return Ok(()),
        };
        let index = self.running_index();
        for (id, before) in fed {
            if let Some(&i) = index.get(&id) {
                self.note_progress(i, before)?;
            }
        }
        Ok(())
    }

    /// With no request left, reads the step still in flight (the rows of
    /// sequences that ended before it: a stop token): the engine is idle
    /// after it. Nothing otherwise.
    pub(super) fn drain_finished(&mut self) -> Result<(), EngineError> {
        if self.running.is_empty() && self.waiting.is_empty() {
            if let Some(f) = self.inflight.take() {
                self.land(f)?;
            }
        }
        Ok(())
    }

    /// Running sequences by id.
    fn running_index(&self) -> HashMap<u64, usize> {
        self.running
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id, i))
            .collect()
    }
}
