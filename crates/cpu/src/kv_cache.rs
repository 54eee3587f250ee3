//! The KV cache of one full-attention layer on the CPU: a pool of
//! `KvSpec.blocks` blocks of [`KV_BLOCK_ROWS`] token rows, each block holding
//! keys and values (after k norm and RoPE) `[kv_heads][KV_BLOCK_ROWS][head_dim]`
//! in f32. A block is allocated when a row is first written to it and held
//! by every slot that wrote it or took a copy of a slot holding it
//! ([`CpuKvCache::copy_slot`]: prefix-cache snapshots and hits share
//! blocks); it is freed when the last of those slots is reset, so a large
//! pool holds memory only for the blocks in use. A sequence reaches its rows through its block
//! table (`headroom_core::ops::BlockTables`): token `p` is row `p % 64` of
//! block `table[p / 64]`. Each slot keeps its length, which batches'
//! histories are checked against.

use headroom_core::ops::{blocks_for, KvSpec, OpError, OpResult, KV_BLOCK_ROWS};
use std::collections::{HashMap, HashSet};

/// One block of K and V and how many slots hold it (the last one's reset
/// frees it).
#[derive(Debug, Clone, PartialEq)]
struct Block {
    k: Box<[f32]>,
    v: Box<[f32]>,
    holders: usize,
}

/// One full-attention layer's KV block pool (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct CpuKvCache {
    pub spec: KvSpec,
    /// `KV_BLOCK_ROWS · kv_heads · head_dim`: elements of a block's K (or V).
    block_elems: usize,
    /// Tokens each slot holds.
    lens: Vec<usize>,
    /// The allocated blocks, by id.
    blocks: HashMap<u32, Block>,
    /// Per slot, the blocks it holds since its last reset.
    held: Vec<HashSet<u32>>,
}

impl CpuKvCache {
    /// An empty pool (no block allocated). Errors when a block's size
    /// overflows or is zero.
    pub fn new(spec: KvSpec) -> OpResult<CpuKvCache> {
        let block_elems = KV_BLOCK_ROWS
            .checked_mul(spec.kv_heads)
            .and_then(|n| n.checked_mul(spec.head_dim))
            .filter(|&n| n > 0 && n.checked_mul(2 * 4).is_some())
            .ok_or_else(|| OpError::shape("new_kv_cache", format!("{spec:?}")))?;
        Ok(CpuKvCache {
            spec,
            block_elems,
            lens: vec![0; spec.slots],
            blocks: HashMap::new(),
            held: vec![HashSet::new(); spec.slots],
        })
    }

    /// Tokens held by `slot` (0 for a slot outside the pool).
    pub fn len(&self, slot: usize) -> usize {
        self.lens.get(slot).copied().unwrap_or(0)
    }

    /// Bytes one allocated block holds (its K and V).
    pub fn block_bytes(&self) -> usize {
        2 * self.block_elems * 4
    }

    /// Blocks allocated now.
    pub fn allocated_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Appends `k`, `v` (token-major `[t][kv_heads][head_dim]`) after the
    /// rows `slot` holds, through `table` (which the caller checked covers
    /// them and names only blocks of the pool). Returns the bytes of the
    /// blocks it allocated.
    pub(crate) fn append(&mut self, slot: usize, table: &[u32], k: &[f32], v: &[f32]) -> usize {
        let (nkv, d) = (self.spec.kv_heads, self.spec.head_dim);
        let row = nkv * d;
        let t = k.len() / row;
        let start = self.lens[slot];
        let (end, mut added) = (start + t, 0);
        let mut p = start;
        while p < end {
            let (id, r0) = (table[p / KV_BLOCK_ROWS], p % KV_BLOCK_ROWS);
            let n = (KV_BLOCK_ROWS - r0).min(end - p);
            let elems = self.block_elems;
            let block = self.blocks.entry(id).or_insert_with(|| {
                added += 2 * elems * 4;
                Block {
                    k: vec![0.0; elems].into_boxed_slice(),
                    v: vec![0.0; elems].into_boxed_slice(),
                    holders: 0,
                }
            });
            if self.held[slot].insert(id) {
                block.holders += 1;
            }
            for s in 0..n {
                let src = (p - start + s) * row;
                for h in 0..nkv {
                    let dst = (h * KV_BLOCK_ROWS + r0 + s) * d;
                    block.k[dst..dst + d].copy_from_slice(&k[src + h * d..][..d]);
                    block.v[dst..dst + d].copy_from_slice(&v[src + h * d..][..d]);
                }
            }
            p += n;
        }
        self.lens[slot] = end;
        added
    }

    /// The first `len` rows of a sequence with block table `table`, as
    /// head-major `[kv_heads][len][head_dim]` keys and values. Errors with
    /// the id of a table block that was never written.
    pub(crate) fn gather(&self, table: &[u32], len: usize) -> Result<(Vec<f32>, Vec<f32>), u32> {
        let (nkv, d) = (self.spec.kv_heads, self.spec.head_dim);
        let mut k = vec![0.0f32; nkv * len * d];
        let mut v = vec![0.0f32; nkv * len * d];
        for (j, &id) in table.iter().enumerate().take(blocks_for(len)) {
            let block = self.blocks.get(&id).ok_or(id)?;
            let first = j * KV_BLOCK_ROWS;
            let n = KV_BLOCK_ROWS.min(len - first) * d;
            for h in 0..nkv {
                let src = h * KV_BLOCK_ROWS * d;
                let dst = (h * len + first) * d;
                k[dst..dst + n].copy_from_slice(&block.k[src..src + n]);
                v[dst..dst + n].copy_from_slice(&block.v[src..src + n]);
            }
        }
        Ok((k, v))
    }

    /// Empties `slot` (length 0) and drops its hold on its blocks, freeing
    /// those no other slot holds. Returns the bytes freed, `None` for a slot
    /// outside the pool.
    pub(crate) fn reset(&mut self, slot: usize) -> Option<usize> {
        let held = std::mem::take(self.held.get_mut(slot)?);
        self.lens[slot] = 0;
        let mut freed = 0;
        for id in held {
            if let Some(b) = self.blocks.get_mut(&id) {
                b.holders -= 1;
                if b.holders == 0 {
                    self.blocks.remove(&id);
                    freed += self.block_bytes();
                }
            }
        }
        Some(freed)
    }

    /// Makes slot `to` hold what slot `from` holds (its length and its
    /// blocks), after a reset of `to`. Returns the bytes that reset freed,
    /// `None` for a slot outside the pool.
    pub(crate) fn copy_slot(&mut self, from: usize, to: usize) -> Option<usize> {
        if from >= self.lens.len() || to >= self.lens.len() {
            return None;
        }
        if from == to {
            return Some(0);
        }
        let freed = self.reset(to)?;
        let held = self.held[from].clone();
        for &id in &held {
            if let Some(b) = self.blocks.get_mut(&id) {
                b.holders += 1;
            }
        }
        self.held[to] = held;
        self.lens[to] = self.lens[from];
        Some(freed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(slots: usize, blocks: usize) -> KvSpec {
        KvSpec {
            slots,
            kv_heads: 2,
            head_dim: 3,
            capacity: 1000,
            blocks,
        }
    }

    fn rows(t: usize, salt: f32) -> Vec<f32> {
        (0..t * 6).map(|i| i as f32 + salt).collect()
    }

    #[test]
    fn pieces_through_a_table_gather_as_one_head_major_sequence() {
        let (kv, d, t) = (2usize, 3usize, 150usize);
        let (k, v) = (rows(t, 0.0), rows(t, 0.5));
        let mut c = CpuKvCache::new(spec(2, 10)).unwrap();
        let table = [7u32, 2, 9];
        let mut added = 0;
        for (a, b) in [(0, 4), (4, 64), (64, 65), (65, 150)] {
            added += c.append(1, &table, &k[a * 6..b * 6], &v[a * 6..b * 6]);
        }
        assert_eq!(c.len(1), t);
        assert_eq!((c.allocated_blocks(), added), (3, 3 * c.block_bytes()));
        let (gk, gv) = c.gather(&table, t).unwrap();
        for h in 0..kv {
            for s in 0..t {
                assert_eq!(&gk[(h * t + s) * d..][..d], &k[(s * kv + h) * d..][..d]);
                assert_eq!(&gv[(h * t + s) * d..][..d], &v[(s * kv + h) * d..][..d]);
            }
        }
        assert_eq!(c.gather(&[7, 3], 70), Err(3), "block 3 was never written");
        assert_eq!(c.reset(1), Some(3 * c.block_bytes()));
        assert_eq!((c.len(1), c.allocated_blocks()), (0, 0));
        assert_eq!(c.reset(2), None);
    }

    #[test]
    fn a_reset_frees_only_the_blocks_its_slot_wrote_last() {
        let mut c = CpuKvCache::new(spec(2, 4)).unwrap();
        c.append(0, &[1, 2], &rows(70, 0.0), &rows(70, 0.0));
        // Block 2 is handed to slot 1 before slot 0 is reset.
        c.append(1, &[2], &rows(5, 1.0), &rows(5, 1.0));
        assert_eq!(c.reset(0), Some(c.block_bytes()), "block 1 only");
        assert_eq!(c.gather(&[2], 5).unwrap().0[..3], [1.0, 2.0, 3.0]);
        assert_eq!(c.reset(1), Some(c.block_bytes()));
        assert_eq!(c.allocated_blocks(), 0);
    }

    #[test]
    fn a_copied_slot_holds_the_blocks_until_every_holder_is_reset() {
        let mut c = CpuKvCache::new(spec(3, 4)).unwrap();
        c.append(0, &[1, 2], &rows(70, 0.0), &rows(70, 0.0));
        assert_eq!(c.copy_slot(0, 2), Some(0));
        assert_eq!(c.len(2), 70);
        assert_eq!(c.reset(0), Some(0), "slot 2 still holds both blocks");
        assert_eq!(c.gather(&[1, 2], 70).unwrap().0[..3], [0.0, 1.0, 2.0]);
        // A hit: slot 1 resumes from slot 2 and writes its own block 3.
        c.copy_slot(2, 1).unwrap();
        c.append(1, &[1, 2, 3], &rows(60, 5.0), &rows(60, 5.0));
        assert_eq!(c.reset(2), Some(0));
        assert_eq!(c.allocated_blocks(), 3);
        assert_eq!(
            c.copy_slot(0, 1),
            Some(3 * c.block_bytes()),
            "slot 1's hold dropped"
        );
        assert_eq!((c.len(1), c.allocated_blocks()), (0, 0));
        assert_eq!(c.copy_slot(0, 5), None);
    }
}
