//! The engine's prefix cache (paged KV, `--no-prefix-cache` off): which
//! cached prefix an admitted sequence resumes from, where its prefill
//! chunks stop for a snapshot, and the blocks and snapshots it leaves.
//!
//! * **Blocks**: after each step every sequence's newly full blocks are
//!   named by their chain hash in the block pool ([`crate::prefix`]), so
//!   they stay cached (idle, LRU) after the sequence ends or is preempted.
//! * **Snapshots** ([`crate::snapshots`]): the GDN state (and KV length) of
//!   a sequence at the end of its prompt's last full block, where its
//!   prompt branches off a longer cached chain than its hit (so the next
//!   request sharing that prefix hits: a shared system prompt), and at every
//!   multiple of the interval (`--prefix-cache-interval`, default none) —
//!   its prefill chunk is cut to end exactly there and the slot is copied
//!   after that step — and at the end of a finished sequence when that is a
//!   block end. The first chunk after a hit that finishes the prefill is
//!   cut only where a snapshot is needed (`snapshot_point`), so a hit's
//!   small remainder is one step.
//! * **Hits**: at admission the longest chain of cached blocks of the
//!   prompt (at most up to its last token's block, so the last token is
//!   always computed and draws the first token) whose end has a snapshot:
//!   its blocks are shared by reference, the snapshot is copied into the
//!   sequence's slot, and prefill starts after it.
//! * **Holds** ([`super::hold`]): a request sharing blocks with a running
//!   sequence that is still computing them waits for its snapshot there.

use super::EngineCore;
use crate::kv::{blocks_for, KV_BLOCK_ROWS};
use crate::prefix::{extend_hashes, BlockHash};
use crate::EngineError;
use headroom_core::ops::Backend;
use headroom_model::{Qwen35Model, StepModel};

/// The salt of a model's block hashes: its configuration and activation
/// dtype (what the KV rows and GDN state depend on besides the tokens).
pub(super) fn model_salt<B: Backend>(model: &Qwen35Model<B>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{:?} {:?}", model.config(), model.backend().act_dtype()).hash(&mut h);
    h.finish()
}

/// What the first waiting sequence's lookup found.
pub(super) struct Lookup {
    /// The longest cached chain with a snapshot at its end.
    pub hit: Option<Hit>,
    /// Where the longest cached chain ends, when a snapshot there is
    /// missing (a snapshot point of its prefill).
    pub branch: Option<usize>,
}

/// A prefix hit found for a waiting sequence.
pub(super) struct Hit {
    /// The cached blocks of the matched chain.
    pub blocks: Vec<u32>,
    /// The name of the snapshot at its end.
    pub hash: BlockHash,
}

impl Hit {
    pub fn tokens(&self) -> usize {
        self.blocks.len() * KV_BLOCK_ROWS
    }
}

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    /// Whether prefix caching runs (paged KV, turned on, snapshot slots).
    pub(super) fn caching(&self) -> bool {
        self.prefix_on && self.snapshots.total() > 0
    }

    /// Whether position `p` of running sequence `i` is a snapshot point:
    /// the end of the last full block of its prefill target, its branch
    /// point, a point a held request waits for, or a multiple of the
    /// interval inside it.
    fn is_snapshot_point(&self, i: usize, p: usize) -> bool {
        let s = &self.running[i];
        let last = s.prefill_target / KV_BLOCK_ROWS * KV_BLOCK_ROWS;
        p > 0
            && (p == last
                || s.branch == Some(p)
                || self.is_hold_point(i, p)
                || (p < last
                    && self
                        .cfg
                        .prefix_cache
                        .interval()
                        .is_some_and(|iv| p.is_multiple_of(iv))))
    }

    /// Where a chunk of `n` prefill rows of running sequence `i` must stop
    /// for a snapshot, past its rows: the next multiple of the interval, a
    /// hold point, its branch point or the end of its prefill target's last
    /// full block, whichever comes first. The first chunk after a prefix hit
    /// that finishes the prefill stops only where a snapshot is needed: at
    /// an interval or hold point, or at a branch point at least an eighth of
    /// the hit past it (a shorter branch is a few blocks of a conversation's
    /// last answer, which a later turn recomputes for less than a split
    /// here costs); its last full block's snapshot is taken only when that
    /// is the chunk's end. So a small remainder after a hit costs one step.
    fn snapshot_point(&self, i: usize, n: usize) -> Option<usize> {
        if !self.caching() {
            return None;
        }
        let s = &self.running[i];
        let last = s.prefill_target / KV_BLOCK_ROWS * KV_BLOCK_ROWS;
        let optional = s.processed > 0
            && s.processed == s.cached_tokens
            && s.processed + n >= s.prefill_target;
        let mut next = if optional { usize::MAX } else { last };
        if let Some(iv) = self.cfg.prefix_cache.interval() {
            let m = (s.processed / iv + 1).saturating_mul(iv);
            if m < last {
                next = next.min(m);
            }
        }
        let needed = |b: usize| !optional || (b - s.processed).saturating_mul(8) >= s.processed;
        if let Some(b) = s.branch.filter(|&b| b > s.processed && needed(b)) {
            next = next.min(b);
        }
        if let Some(h) = self.hold_point(i) {
            next = next.min(h);
        }
        (next > s.processed && next < usize::MAX).then_some(next)
    }

    /// `n` prefill rows of running sequence `i`, cut to end at its snapshot
    /// point when they would cross it.
    pub(super) fn cut_chunk(&self, i: usize, n: usize) -> usize {
        let s = &self.running[i];
        match self.snapshot_point(i, n) {
            Some(p) if s.processed + n > p => p - s.processed,
            _ => n,
        }
    }

    /// The longest cached prefix of waiting sequence `w` with a snapshot
    /// at its end, and where its longest cached chain ends when that is
    /// further (its block hashes computed first).
    pub(super) fn lookup(&mut self, w: usize) -> Lookup {
        let none = Lookup {
            hit: None,
            branch: None,
        };
        if !self.caching() {
            return none;
        }
        let salt = self.salt;
        let Some(s) = self.waiting.get_mut(w) else {
            return none;
        };
        let target = s.prefill_target;
        let started = std::time::Instant::now();
        let before = s.hashes.len();
        extend_hashes(&mut s.hashes, &s.prompt, &s.generated, target, salt);
        if s.hashes.len() > before {
            tracing::debug!(
                blocks = s.hashes.len() - before,
                ms = started.elapsed().as_secs_f64() * 1e3,
                "prefix lookup: block hashes of a waiting request"
            );
        }
        let most = target.saturating_sub(1) / KV_BLOCK_ROWS;
        let chain = self.blocks.lookup(&s.hashes[..most.min(s.hashes.len())]);
        let k = (1..=chain.len())
            .rev()
            .find(|&k| self.snapshots.contains(s.hashes[k - 1]))
            .unwrap_or(0);
        let branch = (chain.len() > k).then_some(chain.len() * KV_BLOCK_ROWS);
        let hit = (k > 0).then(|| Hit {
            blocks: chain[..k].to_vec(),
            hash: s.hashes[k - 1],
        });
        Lookup { hit, branch }
    }

    /// Whether a waiting sequence's prefill fits the pool after
    /// taking `hit`'s blocks: on success they are in `table`.
    pub(super) fn take_hit_blocks(
        &mut self,
        hit: &Hit,
        target: usize,
        table: &mut Vec<u32>,
    ) -> bool {
        self.blocks.acquire(&hit.blocks, table);
        if blocks_for(target) - hit.blocks.len() > self.blocks.free() {
            self.blocks.release(table);
            return false;
        }
        true
    }

    /// Resumes the sequence in `slot` from `hit`'s snapshot.
    pub(super) fn resume(&mut self, hit: &Hit, slot: usize) -> Result<(), EngineError> {
        let from = self.snapshots.get(hit.hash).ok_or_else(|| {
            EngineError::Internal("a prefix hit's snapshot was evicted before its admission".into())
        })?;
        let started = std::time::Instant::now();
        self.model
            .copy_state_slot(&mut self.state, from, slot)
            .map_err(EngineError::from)?;
        tracing::debug!(
            blocks = hit.blocks.len(),
            host_ms = started.elapsed().as_secs_f64() * 1e3,
            "prefix hit: state slot resumed from its snapshot (copies queued)"
        );
        Ok(())
    }

    /// After a step fed running sequence `i` from row `before` on: names its
    /// newly full blocks and takes a snapshot when it is at a snapshot point.
    pub(super) fn note_progress(&mut self, i: usize, before: usize) -> Result<(), EngineError> {
        if !self.caching() {
            return Ok(());
        }
        let salt = self.salt;
        let s = &mut self.running[i];
        extend_hashes(&mut s.hashes, &s.prompt, &s.generated, s.processed, salt);
        let full = s.processed / KV_BLOCK_ROWS;
        for j in before / KV_BLOCK_ROWS..full.min(s.blocks.len()) {
            self.blocks.register(s.blocks[j], s.hashes[j]);
        }
        let at_point = self.is_snapshot_point(i, self.running[i].processed);
        if at_point && before < self.running[i].processed {
            self.snapshot(i)?;
            self.pin_reached(i);
        }
        Ok(())
    }

    /// Copies running sequence `i`'s state into a snapshot slot when its
    /// rows end a full block and no snapshot of that prefix exists.
    pub(super) fn snapshot(&mut self, i: usize) -> Result<(), EngineError> {
        let s = &self.running[i];
        let k = s.processed / KV_BLOCK_ROWS;
        if !self.caching()
            || k == 0
            || !s.processed.is_multiple_of(KV_BLOCK_ROWS)
            || k > s.hashes.len()
        {
            return Ok(());
        }
        let hash: BlockHash = s.hashes[k - 1];
        if self.snapshots.contains(hash) {
            return Ok(());
        }
        let from = s.slot;
        let Some(to) = self.snapshots.insert(hash) else {
            return Ok(());
        };
        self.model
            .copy_state_slot(&mut self.state, from, to)
            .map_err(EngineError::from)
    }
}
