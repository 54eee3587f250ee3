//! The GDN state snapshot pool ([`SnapshotPool`]): spare state slots, each
//! holding every layer's GDN state (recurrent and conv) and KV length of a
//! sequence at a block-aligned position, named by the chain hash of the
//! block that position ends ([`crate::prefix::chain_hash`]). A prefix hit
//! needs one at the end of the matched chain. The pool is a fixed number of
//! slots (`--prefix-cache-state-slots`); taking a snapshot when all are in
//! use evicts the least recently used one that is not pinned: a snapshot a
//! held-back request waits for ([`SnapshotPool::pin`]) stays until it is
//! unpinned. Every operation is O(1).

use crate::lru::Lru;
use crate::prefix::BlockHash;
use std::collections::HashMap;

/// Snapshot slots (see the module doc).
#[derive(Debug, Clone)]
pub struct SnapshotPool {
    /// The model state slot of each snapshot entry.
    slots: Vec<usize>,
    /// The position each entry holds, when in use.
    key: Vec<Option<BlockHash>>,
    by_hash: HashMap<BlockHash, usize>,
    /// Entries in use and not pinned, least recently used first.
    order: Lru,
    /// Pins of each entry (a pinned entry is out of `order`).
    pins: Vec<u32>,
    /// Entries not in use.
    free: Vec<usize>,
}

impl SnapshotPool {
    /// A pool over the model state slots `first..first + n`.
    pub fn new(first: usize, n: usize) -> SnapshotPool {
        SnapshotPool {
            slots: (first..first + n).collect(),
            key: vec![None; n],
            by_hash: HashMap::new(),
            order: Lru::new(n),
            pins: vec![0; n],
            free: (0..n).rev().collect(),
        }
    }

    pub fn total(&self) -> usize {
        self.slots.len()
    }

    pub fn used(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Snapshots pinned (never evicted while pinned).
    pub fn pinned(&self) -> usize {
        self.used() - self.order.len()
    }

    /// Keeps the snapshot named `hash` from eviction until as many
    /// [`Self::unpin`]s; false when there is none.
    pub fn pin(&mut self, hash: BlockHash) -> bool {
        let Some(&e) = self.by_hash.get(&hash) else {
            return false;
        };
        self.pins[e] += 1;
        self.order.remove(e);
        true
    }

    /// Drops one pin of the snapshot named `hash`; the last makes it the
    /// most recently used.
    pub fn unpin(&mut self, hash: BlockHash) {
        let Some(&e) = self.by_hash.get(&hash) else {
            return;
        };
        self.pins[e] = self.pins[e].saturating_sub(1);
        if self.pins[e] == 0 {
            self.order.push_back(e);
        }
    }

    pub fn contains(&self, hash: BlockHash) -> bool {
        self.by_hash.contains_key(&hash)
    }

    /// The state slot of the snapshot named `hash`, marked most recently used.
    pub fn get(&mut self, hash: BlockHash) -> Option<usize> {
        let e = *self.by_hash.get(&hash)?;
        if self.pins[e] == 0 {
            self.order.push_back(e);
        }
        Some(self.slots[e])
    }

    /// A state slot to copy the snapshot named `hash` into (an unused one,
    /// else the least recently used unpinned one's, which is forgotten);
    /// `None` when every slot is pinned or the pool has none.
    pub fn insert(&mut self, hash: BlockHash) -> Option<usize> {
        if let Some(&e) = self.by_hash.get(&hash) {
            if self.pins[e] == 0 {
                self.order.push_back(e);
            }
            return Some(self.slots[e]);
        }
        let e = match self.free.pop() {
            Some(e) => e,
            None => {
                let e = self.order.pop_front()?;
                if let Some(old) = self.key[e].take() {
                    self.by_hash.remove(&old);
                }
                e
            }
        };
        self.key[e] = Some(hash);
        self.by_hash.insert(hash, e);
        self.order.push_back(e);
        Some(self.slots[e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_pool_evicts_the_least_recently_used_snapshot() {
        let mut p = SnapshotPool::new(8, 2);
        assert_eq!((p.total(), p.used()), (2, 0));
        assert_eq!(p.insert(1), Some(8));
        assert_eq!(p.insert(2), Some(9));
        assert_eq!(p.insert(1), Some(8), "already held: the same slot");
        assert_eq!(p.get(1), Some(8));
        assert_eq!(p.insert(3), Some(9), "2 was the least recently used");
        assert!(!p.contains(2) && p.contains(1) && p.contains(3));
        assert_eq!((p.get(2), p.used()), (None, 2));
        assert_eq!(SnapshotPool::new(0, 0).insert(1), None);
    }

    #[test]
    fn a_pinned_snapshot_is_never_evicted() {
        let mut p = SnapshotPool::new(4, 2);
        p.insert(1);
        p.insert(2);
        assert!(p.pin(1) && p.pin(1) && !p.pin(7));
        assert_eq!((p.used(), p.pinned()), (2, 1));
        assert_eq!(p.insert(3), Some(5), "1 is pinned: 2 is evicted");
        assert_eq!(p.get(1), Some(4), "a get leaves it pinned");
        assert_eq!(p.insert(4), Some(5), "3 goes, 1 stays");
        p.unpin(1);
        assert_eq!(p.insert(5), Some(5), "still pinned once: 4 goes");
        assert!(p.pin(5));
        assert_eq!(p.insert(6), None, "every slot pinned");
        p.unpin(1);
        p.unpin(5);
        assert_eq!(p.pinned(), 0);
        assert_eq!(
            p.insert(6),
            Some(4),
            "1, unpinned first, is the least recent"
        );
        assert!(p.contains(5) && !p.contains(1));
    }
}
