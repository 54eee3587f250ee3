//! One planned step through the model ([`EngineCore::run_plan`]): the
//! packed batch with every sequence's block table, the forward and the
//! tokens drawn from its logits ([`EngineCore::forward`]), then each
//! sequence's progress, its tokens streamed and the finished ones retired;
//! a failed forward fails the batch's sequences only.

use super::EngineCore;
use crate::api::{FinishReason, StreamEvent};
use crate::kv::KvBackendKind;
use crate::report::{Drawn, SampledRow, StepReport};
use crate::sampling::{draw_host_rows, HostRow};
use crate::sequence::Sequence;
use crate::EngineError;
use headroom_core::ops::SamplingParams;
use headroom_core::ops::{Backend, Batch, BlockTables};
use headroom_model::qwen3_5::LayerAttentionReport;
use headroom_model::{LogitsRows, StepModel};
use std::time::Instant;

/// A planned step packed for the model.
pub(super) struct Packed {
    /// Its sequences' rows with their slots, histories and block tables.
    pub batch: Batch,
    /// Rows (in batch order) whose sequence draws a token after the step.
    pub draws: Vec<usize>,
    /// Its report's sequences and rows.
    pub report: StepReport,
}

/// The logits rows to draw from, each row's sampling parameters and its
/// random-stream step.
pub(super) type DrawInputs<A> = (A, Vec<SamplingParams>, Vec<u64>);

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    /// Packs `plan`: `push(k, sequence, rows, ids)` appends plan entry
    /// `k`'s input ids to `ids`.
    pub(super) fn pack(
        &self,
        plan: &[(usize, usize)],
        ids: &mut Vec<u32>,
        mut push: impl FnMut(usize, &Sequence, usize, &mut Vec<u32>),
    ) -> Packed {
        let mut seqs = Vec::with_capacity(plan.len());
        let mut report = StepReport::default();
        for (k, &(i, n)) in plan.iter().enumerate() {
            let s = &self.running[i];
            push(k, s, n, ids);
            seqs.push((s.slot, s.processed, n));
            report.sequences.push((s.id, n));
            if s.remaining_prompt() == 0 {
                report.decode_rows += n;
            } else {
                report.prefill_rows += n;
            }
        }
        let mut batch = Batch::packed(&seqs);
        if self.kv.resolved == KvBackendKind::Paged {
            let tables: Vec<&[u32]> = plan
                .iter()
                .map(|&(i, _)| &self.running[i].blocks[..])
                .collect();
            batch = batch.with_blocks(BlockTables::from_tables(&tables));
        }
        let draws = plan
            .iter()
            .enumerate()
            .filter(|(_, &(i, n))| self.running[i].draws_after(n))
            .map(|(k, _)| k)
            .collect();
        Packed {
            batch,
            draws,
            report,
        }
    }

    /// Notes each layer's attention reports on the sequences of `plan`
    /// (and the step's largest transient in `report`).
    pub(super) fn note_attention_reports(
        &mut self,
        plan: &[(usize, usize)],
        reps: &[LayerAttentionReport],
        report: &mut StepReport,
    ) {
        let nseq = plan.len();
        for (r, rep) in reps.iter().enumerate() {
            report.transient_bytes = report.transient_bytes.max(rep.report.transient_bytes);
            self.running[plan[r % nseq].0].note_attention(rep);
        }
    }

    /// The logits rows `draws` of a step's `logits` (all of them as they
    /// are), with each row's sampling parameters and random-stream step (its
    /// tokens drawn so far, read or not).
    pub(super) fn draw_inputs(
        &self,
        plan: &[(usize, usize)],
        draws: &[usize],
        logits: B::Act,
    ) -> Result<DrawInputs<B::Act>, EngineError> {
        let rows = if draws.len() == plan.len() {
            logits
        } else {
            self.model.lead().backend().gather_rows(&logits, draws)?
        };
        let seq = |k: usize| &self.running[plan[k].0];
        let params = draws.iter().map(|&k| seq(k).sampling).collect();
        let steps = draws
            .iter()
            .map(|&k| (seq(k).generated.len() + seq(k).unread()) as u64)
            .collect();
        Ok((rows, params, steps))
    }

    pub(super) fn run_plan(
        &mut self,
        plan: &[(usize, usize)],
        started: Instant,
    ) -> Result<StepReport, EngineError> {
        let mut ids = Vec::new();
        let Packed {
            batch,
            draws,
            mut report,
        } = self.pack(plan, &mut ids, |_, s, n, ids| s.push_inputs(n, ids));
        let forward_started = Instant::now();
        let drawn = self.forward(&ids, &batch, plan, &draws, &mut report);
        report.forward_s = forward_started.elapsed().as_secs_f64();
        tracing::debug!(
            rows = batch.rows(),
            plan_ms = (forward_started - started).as_secs_f64() * 1e3,
            queue_ms = report.queue_s * 1e3,
            forward_ms = report.forward_s * 1e3,
            "engine step: planned and admitted, forward queued on the host, forward done with its tokens drawn"
        );
        let drawn = match drawn {
            Ok(d) => d,
            Err(e) => {
                // Fail every sequence of the batch; the others are untouched.
                self.fail_plan(plan, &e.to_string());
                report.total_s = started.elapsed().as_secs_f64();
                return Ok(report);
            }
        };
        for &(i, n) in plan {
            let before = self.running[i].processed;
            self.running[i].processed += n;
            self.note_progress(i, before)?;
        }
        let mut finished: Vec<(usize, FinishReason)> = Vec::new();
        for (k, (token, logits, logprobs)) in draws.iter().zip(drawn) {
            let i = plan[*k].0;
            if let Some(reason) = self.accept_token(i, (token, logits, logprobs), &mut report) {
                finished.push((i, reason));
            }
        }
        finished.sort_unstable_by_key(|f| std::cmp::Reverse(f.0));
        for (i, reason) in finished {
            self.retire(i, reason);
        }
        self.stats.steps += 1;
        report.total_s = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// Running sequence `i`'s drawn token: counted, reported in `report`
    /// and streamed; its finish reason when it ends the sequence.
    pub(super) fn accept_token(
        &mut self,
        i: usize,
        (token, logits, logprobs): Drawn,
        report: &mut StepReport,
    ) -> Option<FinishReason> {
        let s = &mut self.running[i];
        self.stats.generated_tokens += 1;
        report.sampled.push(SampledRow {
            id: s.id,
            token,
            logits,
        });
        s.push_token(token, logprobs)
    }

    /// Fails every sequence of `plan` with `msg` (a failed forward or
    /// draw), giving back their blocks and slots.
    pub(super) fn fail_plan(&mut self, plan: &[(usize, usize)], msg: &str) {
        let mut idx: Vec<usize> = plan.iter().map(|p| p.0).collect();
        idx.sort_unstable_by(|a, b| b.cmp(a));
        idx.dedup();
        for i in idx {
            let mut s = self.running.remove(i);
            s.sink.send(StreamEvent::Error(msg.to_string()));
            self.blocks.release(&mut s.blocks);
            self.slots.give(s.slot);
        }
        tracing::warn!("engine step failed: {msg}");
    }

    /// Runs the batch and draws a token for each row in `draws` (with its
    /// logits when captured); notes the attention reports per sequence.
    fn forward(
        &mut self,
        ids: &[u32],
        batch: &Batch,
        plan: &[(usize, usize)],
        draws: &[usize],
        report: &mut StepReport,
    ) -> Result<Vec<Drawn>, EngineError> {
        let queue_started = Instant::now();
        let out = self
            .model
            .step(&mut self.state, ids, batch, &self.routes, LogitsRows::Last)?;
        report.queue_s = queue_started.elapsed().as_secs_f64();
        self.note_attention_reports(plan, &out.attention, report);
        if draws.is_empty() {
            return Ok(Vec::new());
        }
        let logits = out
            .logits
            .ok_or_else(|| EngineError::Internal("a step asked for logits returned none".into()))?;
        let (rows, params, steps) = self.draw_inputs(plan, draws, logits)?;
        let be = self.model.lead().backend();
        let mut tokens = be.sample(&rows, &params, &steps)?;
        let vocab = self.model.lead().vocab_size();
        let host: Vec<HostRow<'_>> = draws
            .iter()
            .enumerate()
            .map(|(row, &k)| (row, &self.running[plan[k].0]))
            .filter(|(_, s)| s.extras.on_host())
            .map(|(row, s)| HostRow {
                row,
                params: s.sampling,
                step: s.generated.len() as u64,
                extras: s.extras,
                prompt: &s.prompt,
                generated: &s.generated,
            })
            .collect();
        let logprobs = draw_host_rows(be, &rows, vocab, &host, &mut tokens)?;
        let logits: Vec<Option<Vec<f32>>> = if self.cfg.capture_logits {
            let all = be.act_to_f32(&rows)?;
            all.chunks(vocab.max(1)).map(|c| Some(c.to_vec())).collect()
        } else {
            vec![None; tokens.len()]
        };
        Ok(tokens
            .into_iter()
            .zip(logits)
            .zip(logprobs)
            .map(|((t, l), p)| (t, l, p))
            .collect())
    }
}
