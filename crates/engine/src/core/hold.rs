//! Holding back a waiting request whose prefix a running sequence is still
//! computing (prefix caching on), so that a burst of requests sharing a
//! prefix computes it once:
//!
//! * At admission a waiting request that shares at least one full block
//!   with a running sequence still prefilling those blocks — past the hit it
//!   would get now — is held on that sequence (the *source*) at the branch
//!   point, the end of the last full block the two share ([`Holds`]). The
//!   source's prefill chunks stop there ([`EngineCore::hold_point`]), so it
//!   takes a GDN snapshot at that point; the snapshot is pinned in the
//!   snapshot pool until every request held on it was admitted (as a hit)
//!   or went away.
//! * A held request is skipped by admission; requests behind it that share
//!   nothing are admitted as usual (first come, first served among them).
//! * It is released — admitted cold, or from whatever the cache holds —
//!   when its source is cancelled, preempted, ends or passes the point
//!   without a snapshot. No point is made when it would leave the snapshot
//!   pool without an unpinned slot, so a hold never waits on a snapshot that
//!   cannot be taken.

use super::EngineCore;
use crate::kv::KV_BLOCK_ROWS;
use crate::prefix::BlockHash;
use crate::scheduler::StepBudget;
use headroom_core::ops::Backend;
use headroom_model::StepModel;
use std::collections::HashMap;

/// A branch point some waiting requests are held on.
#[derive(Debug, Clone, Copy)]
struct Point {
    /// The running sequence computing it.
    source: u64,
    /// Its position in tokens (a block end).
    at: usize,
    /// Whether its snapshot was taken (and pinned).
    pinned: bool,
    /// Requests held on it (or released by its snapshot, not yet admitted).
    waiters: usize,
}

/// The engine's held requests (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// The point (named by the hash of the block it ends) of each held
    /// request, by request id.
    held: HashMap<u64, BlockHash>,
    points: HashMap<BlockHash, Point>,
}

impl Holds {
    /// Whether request `id` waits for a snapshot not taken yet.
    pub fn is_held(&self, id: u64) -> bool {
        self.held
            .get(&id)
            .and_then(|h| self.points.get(h))
            .is_some_and(|p| !p.pinned)
    }
}

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    /// The next hold point of running sequence `i` past its rows: where its
    /// prefill must stop for a snapshot a held request waits for.
    pub(super) fn hold_point(&self, i: usize) -> Option<usize> {
        let s = &self.running[i];
        self.holds
            .points
            .values()
            .filter(|p| p.source == s.id && !p.pinned && p.at > s.processed)
            .map(|p| p.at)
            .min()
    }

    /// Whether `p` is a hold point of running sequence `i`.
    pub(super) fn is_hold_point(&self, i: usize, p: usize) -> bool {
        let id = self.running[i].id;
        self.holds
            .points
            .values()
            .any(|q| q.source == id && q.at == p && !q.pinned)
    }

    /// After running sequence `i` reached a block end: pins the snapshot of
    /// every point it was computing there (taken by then), releasing the
    /// requests held on it.
    pub(super) fn pin_reached(&mut self, i: usize) {
        let s = &self.running[i];
        let (id, at) = (s.id, s.processed);
        for (h, p) in self.holds.points.iter_mut() {
            if p.source == id && p.at == at && !p.pinned && self.snapshots.pin(*h) {
                p.pinned = true;
            }
        }
    }

    /// Request `id` leaves its hold (admitted or gone): the last waiter of
    /// a point unpins its snapshot and drops it.
    pub(super) fn leave_hold(&mut self, id: u64) {
        let Some(h) = self.holds.held.remove(&id) else {
            return;
        };
        let Some(p) = self.holds.points.get_mut(&h) else {
            return;
        };
        p.waiters = p.waiters.saturating_sub(1);
        if p.waiters == 0 {
            if p.pinned {
                self.snapshots.unpin(h);
            }
            self.holds.points.remove(&h);
        }
    }

    /// Drops every hold (shutdown).
    pub(super) fn clear_holds(&mut self) {
        for (h, p) in self.holds.points.drain() {
            if p.pinned {
                self.snapshots.unpin(h);
            }
        }
        self.holds.held.clear();
    }

    /// Releases the requests held on points whose source is gone (ended,
    /// cancelled, preempted) or passed the point without a snapshot.
    pub(super) fn refresh_holds(&mut self) {
        let lost: Vec<BlockHash> = self
            .holds
            .points
            .iter()
            .filter(|(_, p)| {
                !p.pinned
                    && !self
                        .running
                        .iter()
                        .any(|s| s.id == p.source && s.processed < p.at)
            })
            .map(|(h, _)| *h)
            .collect();
        if lost.is_empty() {
            return;
        }
        for h in &lost {
            self.holds.points.remove(h);
        }
        self.holds.held.retain(|_, h| !lost.contains(h));
    }

    /// Holds waiting request `w` when a running sequence still prefilling
    /// shares more full blocks with it than its hit now (the one sharing
    /// the most); a planned chunk of that source crossing the branch point
    /// is cut there (its rows given back to `budget`). False when it is not
    /// held.
    pub(super) fn try_hold(
        &mut self,
        w: usize,
        plan: &mut [(usize, usize)],
        budget: &mut StepBudget,
    ) -> bool {
        if !self.caching() || self.holds.held.contains_key(&self.waiting[w].id) {
            return false;
        }
        let hit_blocks = self.lookup(w).hit.map_or(0, |h| h.blocks.len());
        let s = &self.waiting[w];
        let most = s.prefill_target.saturating_sub(1) / KV_BLOCK_ROWS;
        let mine = &s.hashes[..most.min(s.hashes.len())];
        let best = self
            .running
            .iter()
            .enumerate()
            .filter(|(_, r)| r.remaining_prompt() > 0)
            .map(|(j, r)| (j, shared_blocks(mine, &r.hashes)))
            .filter(|&(j, k)| k > hit_blocks && k * KV_BLOCK_ROWS > self.running[j].processed)
            .max_by_key(|&(j, k)| (k, self.running[j].processed));
        let Some((j, k)) = best else {
            return false;
        };
        let hash = mine[k - 1];
        if self.snapshots.contains(hash) {
            return false;
        }
        let id = s.id;
        let (source, at) = (self.running[j].id, k * KV_BLOCK_ROWS);
        match self.holds.points.get_mut(&hash) {
            Some(p) if !p.pinned && p.source == source => p.waiters += 1,
            Some(_) => return false,
            None => {
                if self.holds.points.len() + 1 >= self.snapshots.total() {
                    return false;
                }
                self.holds.points.insert(
                    hash,
                    Point {
                        source,
                        at,
                        pinned: false,
                        waiters: 1,
                    },
                );
            }
        }
        self.holds.held.insert(id, hash);
        let processed = self.running[j].processed;
        for e in plan.iter_mut().filter(|e| e.0 == j) {
            if processed + e.1 > at {
                budget.give_back(processed + e.1 - at);
                e.1 = at - processed;
            }
        }
        true
    }
}

/// How many leading blocks two chains of block hashes share (a chain hash
/// names its whole prefix, so the shared blocks are a prefix: binary search).
fn shared_blocks(a: &[BlockHash], b: &[BlockHash]) -> usize {
    let n = a.len().min(b.len());
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if a[mid - 1] == b[mid - 1] {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::shared_blocks;

    #[test]
    fn shared_blocks_is_the_common_prefix_of_two_chains() {
        let a = [1u128, 2, 3, 4, 5];
        assert_eq!(shared_blocks(&a, &[1, 2, 3, 9]), 3);
        assert_eq!(shared_blocks(&a, &[1, 2, 3, 4, 5, 6]), 5);
        assert_eq!(shared_blocks(&a, &[7, 8]), 0);
        assert_eq!(shared_blocks(&a, &[]), 0);
        assert_eq!(shared_blocks(&[1], &[1]), 1);
    }
}
