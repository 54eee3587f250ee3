//! The GDN state snapshot pool ([`SnapshotPool`]): spare state slots, each
//! holding every layer's GDN state (recurrent and conv) and KV length of a
//! sequence at a block-aligned position, named by the chain hash of the
//! block that position ends ([`crate::prefix::chain_hash`]). A prefix hit
//! needs one at the end of the matched chain. The pool is a fixed number of
//! slots (`--prefix-cache-state-slots`); taking a snapshot when all are in
//! use evicts the least recently used one. Every operation is O(1).

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
    /// Entries in use, least recently used first.
    order: Lru,
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
            free: (0..n).rev().collect(),
        }
    }

    pub fn total(&self) -> usize {
        self.slots.len()
    }

    pub fn used(&self) -> usize {
        self.order.len()
    }

    pub fn contains(&self, hash: BlockHash) -> bool {
        self.by_hash.contains_key(&hash)
    }

    /// The state slot of the snapshot named `hash`, marked most recently used.
    pub fn get(&mut self, hash: BlockHash) -> Option<usize> {
        let e = *self.by_hash.get(&hash)?;
        self.order.push_back(e);
        Some(self.slots[e])
    }

    /// A state slot to copy the snapshot named `hash` into (an unused one,
    /// else the least recently used one's, which is forgotten); `None` when
    /// the pool has no slots.
    pub fn insert(&mut self, hash: BlockHash) -> Option<usize> {
        if let Some(&e) = self.by_hash.get(&hash) {
            self.order.push_back(e);
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
}
