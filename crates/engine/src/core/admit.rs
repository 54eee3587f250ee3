//! Who runs: admission of the first waiting request, KV blocks taken as a
//! running sequence grows, preemption when the pool is short, and the end
//! of a sequence (finished, cancelled) giving its slot and blocks back.
//!
//! * **paged**: a request is admitted when a state slot is free and the
//!   blocks of its prefill (its prompt; after a preemption its prompt and
//!   generated tokens) are free now. Before a step writes a sequence's rows
//!   its table grows ([`EngineCore::grow`]); when the pool is short the most
//!   recently admitted running sequence is preempted — its blocks and slot
//!   given back, its tokens kept, queued at the front of the waiting queue —
//!   until the growth fits. The oldest running sequence is never preempted
//!   for a younger one, so it always progresses (FCFS, no deadlock, no
//!   starvation); `Limits::check` refused any request larger than the pool.
//! * **prefix hits** (paged, [`super::cache`]): a request resuming from a
//!   cached prefix takes references on its blocks and needs free blocks for
//!   the rest only; preemption and the end of a sequence drop its
//!   references (its named blocks stay cached until the pool needs them).
//! * **held requests** ([`super::hold`]): admission skips a request waiting
//!   for a running sequence's snapshot of their shared prefix and admits the
//!   first one behind it that is not held.
//! * **contiguous**: a request's blocks for prompt + max tokens (its slot's
//!   rows) and its predicted memory are counted at admission; nothing is
//!   preempted.

use super::EngineCore;
use crate::api::{FinishReason, StreamEvent};
use crate::kv::{blocks_for, KvBackendKind};
use crate::scheduler::StepBudget;
use crate::EngineError;
use headroom_core::ops::Backend;
use headroom_model::StepModel;

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    fn paged(&self) -> bool {
        self.kv.resolved == KvBackendKind::Paged
    }

    fn committed_blocks(&self, extra: usize) -> usize {
        self.running
            .iter()
            .map(|s| blocks_for(s.prompt.len() + s.max_tokens))
            .sum::<usize>()
            + extra
    }

    /// Admits the first waiting request that is not held back
    /// ([`super::hold`]), holding those that should wait on the way (a
    /// planned chunk of their source may be cut: `plan`, `budget`). False
    /// when none was admitted: the first candidate does not fit (first
    /// come, first served) or every waiting request is held.
    pub(super) fn admit_next(
        &mut self,
        plan: &mut [(usize, usize)],
        budget: &mut StepBudget,
    ) -> Result<bool, EngineError> {
        self.refresh_holds();
        let mut w = 0;
        while w < self.waiting.len() {
            let id = self.waiting[w].id;
            if self.holds.is_held(id) || self.try_hold(w, plan, budget) {
                w += 1;
                continue;
            }
            return self.try_admit(w);
        }
        Ok(false)
    }

    /// Moves waiting request `w` into the running set when a slot is free
    /// and (paged) its prefill's blocks are free now, or (contiguous) its
    /// prompt + max tokens and its memory fit; resets its slot.
    fn try_admit(&mut self, w: usize) -> Result<bool, EngineError> {
        let Some(next) = self.waiting.get(w) else {
            return Ok(false);
        };
        if self.slots.free() == 0 {
            return Ok(false);
        }
        let (rows, target) = (next.prompt.len() + next.max_tokens, next.prefill_target);
        let mut hit_table = Vec::new();
        let found = self.lookup(w);
        let hit = found.hit;
        if let Some(h) = &hit {
            if !self.take_hit_blocks(h, target, &mut hit_table) {
                return Ok(false);
            }
        } else if self.paged() {
            if blocks_for(target) > self.blocks.free() {
                return Ok(false);
            }
        } else if !self.contiguous_fits(w, rows) {
            return Ok(false);
        }
        let mut seq = self.waiting.remove(w).expect("checked above");
        self.leave_hold(seq.id);
        let slot = self.slots.take().expect("checked above");
        if hit.is_none() {
            // A hit's resume overwrites every layer's slot state (GDN conv
            // and recurrent state, KV length): zeroing it first would only
            // queue ~60 more memsets (≈ 0.45 ms of host time on an H200
            // host for the 35B shape) before the follow-up turn's step.
            self.model.reset_slot(&mut self.state, slot)?;
        }
        if self.caching() {
            self.stats.prefix_cache_queried_tokens += target as u64;
        }
        seq.branch = found.branch;
        if let Some(h) = &hit {
            self.resume(h, slot)?;
            seq.blocks = hit_table;
            seq.processed = h.tokens();
            self.stats.prefix_cache_hit_tokens += h.tokens() as u64;
            if seq.preemptions == 0 {
                seq.cached_tokens = h.tokens();
            }
        }
        if !self.paged() {
            self.blocks
                .ensure(&mut seq.blocks, rows)
                .map_err(|e| EngineError::Internal(e.to_string()))?;
        }
        seq.slot = slot;
        if seq.preemptions == 0 {
            self.stats.admitted += 1;
            self.stats.prompt_tokens += seq.prompt.len() as u64;
        }
        self.running.push(seq);
        Ok(true)
    }

    /// Whether waiting request `w`'s `rows` blocks and its predicted
    /// memory fit next to the running ones (contiguous KV).
    fn contiguous_fits(&mut self, w: usize, rows: usize) -> bool {
        if self.committed_blocks(blocks_for(rows)) > self.blocks.total() {
            return false;
        }
        let Some(budget) = self.cfg.memory_budget_bytes else {
            return true;
        };
        let Some(next) = self.waiting.get(w) else {
            return false;
        };
        let committed = self.committed(Some(&next.prediction));
        if committed <= budget {
            return true;
        }
        if !next.waited_for_memory {
            tracing::info!(
                "request {} waits for memory: predicted {} bytes ({}), {} bytes with the \
                 running requests > budget {budget}",
                next.id,
                next.prediction.total(),
                next.prediction.detail(),
                committed
            );
        }
        if let Some(next) = self.waiting.get_mut(w) {
            next.waited_for_memory = true;
        }
        false
    }

    /// Makes running sequence `i`'s block table cover `rows` rows (paged),
    /// preempting the most recently admitted running sequences while the
    /// pool is short (and dropping their entries from `plan`). False when
    /// `i` itself was preempted or ended (it was the most recent, or alone
    /// and larger than the pool).
    pub(super) fn grow(&mut self, i: usize, rows: usize, plan: &mut Vec<(usize, usize)>) -> bool {
        if !self.paged() {
            return true;
        }
        loop {
            let Err(short) = self.blocks.ensure(&mut self.running[i].blocks, rows) else {
                return true;
            };
            let last = self.running.len() - 1;
            if last == 0 {
                let mut s = self.running.remove(0);
                s.sink.send(StreamEvent::Error(format!(
                    "the sequence needs {rows} KV rows and cannot fit even alone: {short} \
                     (the pool holds {} blocks of {} rows)",
                    self.blocks.total(),
                    crate::kv::KV_BLOCK_ROWS
                )));
                self.blocks.release(&mut s.blocks);
                self.slots.give(s.slot);
                plan.clear();
                return false;
            }
            self.preempt(last);
            plan.retain(|p| p.0 != last);
            if last == i {
                return false;
            }
        }
    }

    /// Preempts running sequence `j`: its blocks and slot go back, its
    /// tokens stay, and it waits at the front of the queue.
    fn preempt(&mut self, j: usize) {
        let mut s = self.running.remove(j);
        let blocks = self.blocks.release(&mut s.blocks);
        self.slots.give(s.slot);
        s.preempted();
        self.stats.preemptions += 1;
        tracing::info!(
            "request {} preempted (KV pool short): {blocks} blocks back, {} tokens to recompute",
            s.id,
            s.prefill_target
        );
        self.waiting.push_front(s);
    }

    /// Removes running sequence `i`, freeing its slot and blocks (its
    /// state snapshotted first when it ends a full block).
    pub(super) fn retire(&mut self, i: usize, reason: FinishReason) {
        self.retire_with(i, reason, true);
    }

    /// [`Self::retire`], taking the end snapshot only when `snapshot` (a
    /// sequence with a row in a step in flight has no state to snapshot at
    /// its end: `core/overlap.rs`).
    pub(super) fn retire_with(&mut self, i: usize, reason: FinishReason, snapshot: bool) {
        if let Err(e) = if snapshot { self.snapshot(i) } else { Ok(()) } {
            tracing::warn!(
                "request {}: no prefix-cache snapshot at its end: {e}",
                self.running[i].id
            );
        }
        let mut s = self.running.remove(i);
        s.finish(reason);
        self.blocks.release(&mut s.blocks);
        self.slots.give(s.slot);
        match reason {
            FinishReason::Cancelled => self.stats.cancelled += 1,
            _ => self.stats.finished += 1,
        }
    }

    /// Ends every cancelled request, waiting or running.
    pub(super) fn reap_cancelled(&mut self) {
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].sink.cancelled() {
                let s = self.waiting.remove(i).expect("in range");
                self.leave_hold(s.id);
                s.finish(FinishReason::Cancelled);
                self.stats.cancelled += 1;
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].sink.cancelled() {
                self.retire(i, FinishReason::Cancelled);
            } else {
                i += 1;
            }
        }
    }
}
