//! The paged KV pool with prefix caching ([`BlockPool`]): block ids handed
//! to sequences' tables with reference counts, and full blocks addressed by
//! their content.
//!
//! * A full block (all [`KV_BLOCK_ROWS`] rows written) is named by a chained
//!   hash ([`chain_hash`]): its parent block's hash, its token ids and a salt
//!   of everything else its values depend on (the model, the dtype). Equal
//!   hashes mean equal prefixes, so a new request reuses the longest chain of
//!   cached blocks its own hashes name ([`BlockPool::lookup`]) by taking
//!   references on them ([`BlockPool::acquire`]); a shared block is only
//!   read (a sequence writes at rows past its history, in its own blocks).
//! * A block whose last reference goes ([`BlockPool::release`]) stays cached
//!   when it has a hash — idle, in an LRU order, the deepest block of a
//!   released chain least recent — until the pool needs it: allocation
//!   takes a never-cached free block first, then evicts the least recently
//!   used idle one (forgetting its hash). Every operation is O(1) per block.
//!
//! With no block ever registered ([`BlockPool::register`]) this is a plain
//! free list.

use crate::kv::{blocks_for, OutOfBlocks, KV_BLOCK_ROWS};
use crate::lru::Lru;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The content address of a full block and of the prefix it ends.
pub type BlockHash = u128;

/// The hash of a full block of `tokens` after the block hashed `parent`
/// (`None` for a sequence's first block), under `salt`: 128 bits from two
/// differently keyed SipHash passes.
pub fn chain_hash(parent: Option<BlockHash>, tokens: &[u32], salt: u64) -> BlockHash {
    let half = |key: u8| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (key, salt, parent, tokens).hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

/// Appends to `hashes` the chain hashes of the full blocks of the first
/// `len` tokens of `head` followed by `tail` not yet in it (block `j`
/// covers tokens `64j..64j+64`).
pub fn extend_hashes(
    hashes: &mut Vec<BlockHash>,
    head: &[u32],
    tail: &[u32],
    len: usize,
    salt: u64,
) {
    let full = len.min(head.len() + tail.len()) / KV_BLOCK_ROWS;
    let mut block = Vec::with_capacity(KV_BLOCK_ROWS);
    while hashes.len() < full {
        let (from, to) = (
            hashes.len() * KV_BLOCK_ROWS,
            (hashes.len() + 1) * KV_BLOCK_ROWS,
        );
        block.clear();
        block.extend_from_slice(&head[from.min(head.len())..to.min(head.len())]);
        let h = head.len();
        block.extend_from_slice(&tail[from.max(h) - h..to.max(h) - h]);
        let next = chain_hash(hashes.last().copied(), &block, salt);
        hashes.push(next);
    }
}

/// The KV block pool (see the module doc).
#[derive(Debug, Clone)]
pub struct BlockPool {
    total: usize,
    /// Blocks with no reference and no hash; the next one taken is the last.
    free: Vec<u32>,
    /// References (tables holding each block).
    refs: Vec<u32>,
    /// The content hash of each registered block.
    hash: Vec<Option<BlockHash>>,
    by_hash: HashMap<BlockHash, u32>,
    /// Registered blocks with no reference, least recently released first.
    idle: Lru,
}

impl BlockPool {
    /// A pool of `total` blocks (bounded by `u32` ids), all free.
    pub fn new(total: usize) -> BlockPool {
        let total = total.min(u32::MAX as usize);
        BlockPool {
            total,
            free: (0..total as u32).rev().collect(),
            refs: vec![0; total],
            hash: vec![None; total],
            by_hash: HashMap::new(),
            idle: Lru::new(total),
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Blocks a table may take now: free ones and idle cached ones.
    pub fn free(&self) -> usize {
        self.free.len() + self.idle.len()
    }

    /// Blocks some table holds.
    pub fn used(&self) -> usize {
        self.total - self.free()
    }

    /// Idle blocks kept for their content.
    pub fn cached(&self) -> usize {
        self.idle.len()
    }

    /// Takes one block for a table: a free one, else the least recently
    /// used idle one (its hash forgotten).
    fn take(&mut self) -> Option<u32> {
        let b = match self.free.pop() {
            Some(b) => b,
            None => {
                let b = self.idle.pop_front()? as u32;
                if let Some(h) = self.hash[b as usize].take() {
                    self.by_hash.remove(&h);
                }
                b
            }
        };
        self.refs[b as usize] = 1;
        Some(b)
    }

    /// Makes `table` cover `rows` token rows, taking blocks as needed; on
    /// failure nothing is taken.
    pub fn ensure(&mut self, table: &mut Vec<u32>, rows: usize) -> Result<(), OutOfBlocks> {
        let need = blocks_for(rows).saturating_sub(table.len());
        if need > self.free() {
            return Err(OutOfBlocks {
                need,
                free: self.free(),
            });
        }
        for _ in 0..need {
            table.push(self.take().expect("counted above"));
        }
        Ok(())
    }

    /// Drops the references of every block of `table` (left empty): a
    /// block nobody else holds becomes idle when registered (the table's
    /// last block least recent), else free. Returns how many blocks.
    pub fn release(&mut self, table: &mut Vec<u32>) -> usize {
        let n = table.len();
        for b in table.drain(..).rev() {
            let i = b as usize;
            self.refs[i] = self.refs[i].saturating_sub(1);
            if self.refs[i] == 0 {
                if self.hash[i].is_some() {
                    self.idle.push_back(i);
                } else {
                    self.free.push(b);
                }
            }
        }
        n
    }

    /// Names full block `block` by `hash`, unless it has a name already or
    /// another block holds that content (the first one stays the cached one).
    pub fn register(&mut self, block: u32, hash: BlockHash) {
        let i = block as usize;
        if i >= self.total || self.hash[i].is_some() || self.by_hash.contains_key(&hash) {
            return;
        }
        self.hash[i] = Some(hash);
        self.by_hash.insert(hash, block);
    }

    /// The cached blocks of the longest prefix of `hashes` (one per block,
    /// in chain order) whose every block is cached.
    pub fn lookup(&self, hashes: &[BlockHash]) -> Vec<u32> {
        hashes
            .iter()
            .map_while(|h| self.by_hash.get(h).copied())
            .collect()
    }

    /// Takes a reference on each of `blocks` (cached ones from
    /// [`Self::lookup`]) and appends them to `table`.
    pub fn acquire(&mut self, blocks: &[u32], table: &mut Vec<u32>) {
        for &b in blocks {
            let i = b as usize;
            if self.refs[i] == 0 {
                self.idle.remove(i);
            }
            self.refs[i] += 1;
            table.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_taken_by_rows_and_given_back() {
        let mut a = BlockPool::new(5);
        let (mut t1, mut t2, mut t3) = (Vec::new(), Vec::new(), Vec::new());
        a.ensure(&mut t1, 1).unwrap();
        assert_eq!((a.used(), &t1[..]), (1, &[0u32][..]));
        a.ensure(&mut t1, 64).unwrap();
        assert_eq!(a.used(), 1, "64 rows fit one block");
        a.ensure(&mut t1, 65).unwrap();
        a.ensure(&mut t2, 128).unwrap();
        assert_eq!((a.used(), a.free()), (4, 1));
        assert_eq!(
            a.ensure(&mut t3, 129),
            Err(OutOfBlocks { need: 3, free: 1 })
        );
        assert_eq!(
            (a.used(), t3.len()),
            (4, 0),
            "a failed ensure takes nothing"
        );
        assert_eq!(a.release(&mut t1), 2);
        assert_eq!((a.release(&mut t1), t1.len()), (0, 0));
        assert_eq!((a.free(), a.cached()), (3, 0), "unregistered: free");
        a.ensure(&mut t3, 129).unwrap();
        let mut t = t3.clone();
        t.extend(&t2);
        t.sort();
        t.dedup();
        assert_eq!(t.len(), 5, "no block is in two tables");
        assert!(t.iter().all(|&b| b < 5));
    }

    #[test]
    fn the_chain_hash_names_the_whole_prefix_and_the_salt() {
        let a: Vec<u32> = (0..64).collect();
        let b: Vec<u32> = (64..128).collect();
        let h0 = chain_hash(None, &a, 1);
        assert_eq!(h0, chain_hash(None, &a, 1));
        assert_ne!(h0, chain_hash(None, &a, 2), "another model or dtype");
        assert_ne!(chain_hash(Some(h0), &b, 1), chain_hash(None, &b, 1));
        let other = chain_hash(None, &b, 1);
        assert_ne!(chain_hash(Some(h0), &b, 1), chain_hash(Some(other), &b, 1));
        let tokens: Vec<u32> = (0..200).collect();
        let mut hs = Vec::new();
        extend_hashes(&mut hs, &tokens[..100], &tokens[100..], 130, 1);
        assert_eq!(hs, vec![h0, chain_hash(Some(h0), &b, 1)]);
        extend_hashes(&mut hs, &tokens[..150], &tokens[150..], 1000, 1);
        assert_eq!(hs.len(), 3, "only full blocks, each once");
        assert_eq!(hs[2], chain_hash(Some(hs[1]), &tokens[128..192], 1));
    }

    #[test]
    fn released_registered_blocks_stay_cached_and_are_shared_by_reference() {
        let mut p = BlockPool::new(4);
        let mut t = Vec::new();
        p.ensure(&mut t, 192).unwrap();
        let hs = [10u128, 11, 12];
        for (&b, &h) in t.iter().zip(&hs) {
            p.register(b, h);
        }
        let kept = t.clone();
        assert_eq!(p.release(&mut t), 3);
        assert_eq!((p.free(), p.cached(), p.used()), (4, 3, 0));
        assert_eq!(p.lookup(&[10, 11, 99, 12]), kept[..2].to_vec());
        // Two tables share the first two blocks; each writes its own third.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        p.acquire(&kept[..2], &mut a);
        p.acquire(&kept[..2], &mut b);
        assert_eq!((p.cached(), p.used()), (1, 2));
        p.ensure(&mut a, 130).unwrap();
        assert_eq!(a[2], 3, "a free block before an idle cached one");
        p.ensure(&mut b, 130).unwrap();
        assert_eq!(b[2], kept[2], "then the idle one, evicted");
        assert_eq!(p.lookup(&hs), kept[..2].to_vec(), "its hash is forgotten");
        p.release(&mut a);
        assert_eq!(p.used(), 3, "b still holds the shared blocks");
        p.release(&mut b);
        assert_eq!((p.used(), p.cached()), (0, 2));
    }

    #[test]
    fn the_deepest_block_of_a_released_chain_is_evicted_first() {
        let mut p = BlockPool::new(3);
        let mut t = Vec::new();
        p.ensure(&mut t, 192).unwrap();
        for (&b, h) in t.iter().zip([1u128, 2, 3]) {
            p.register(b, h);
        }
        let kept = t.clone();
        p.release(&mut t);
        let mut n = Vec::new();
        p.ensure(&mut n, 1).unwrap();
        assert_eq!(n, vec![kept[2]]);
        assert_eq!(p.lookup(&[1, 2, 3]), kept[..2].to_vec());
        // A second block with content already cached stays unnamed.
        p.register(n[0], 1);
        p.release(&mut n);
        assert_eq!((p.cached(), p.free()), (2, 3));
        let mut m = Vec::new();
        p.ensure(&mut m, 1).unwrap();
        assert_eq!(m, vec![kept[2]], "the unnamed block went back free");
    }
}
