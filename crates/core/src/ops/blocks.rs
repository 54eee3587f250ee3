//! Paged KV: the block size, a batch's block tables and how a backend finds
//! the rows of a sequence in a KV pool.
//!
//! A KV cache ([`super::KvSpec`]) is a pool of `blocks` blocks of
//! [`KV_BLOCK_ROWS`] token rows (each block holds those rows for every KV
//! head). Token `p` of a sequence lives in block `table[p / KV_BLOCK_ROWS]`,
//! row `p % KV_BLOCK_ROWS`. The engine owns which blocks a sequence holds and
//! passes each sequence's table in its [`super::Batch`] ([`BlockTables`],
//! flattened like `cu_seqlens`). A batch without tables reads the identity
//! layout: slot `s` owns blocks `s · blocks_per_slot ..` (a pool sized
//! `slots × blocks_per_slot`: the contiguous layout as a special case).

use super::{Batch, KvSpec, OpError, OpResult};

/// Token rows per KV block: the fused attention kernel's key tile, so a key
/// tile is one block (chosen on the H200: `docs/perf/serving.md`).
pub const KV_BLOCK_ROWS: usize = 64;

/// Blocks needed to hold `rows` token rows.
pub fn blocks_for(rows: usize) -> usize {
    rows.div_ceil(KV_BLOCK_ROWS)
}

/// The block table of every sequence of a batch, flattened: sequence `i`'s
/// blocks are `ids[starts[i] .. starts[i + 1]]`, in token order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockTables {
    /// `len() == sequences + 1`, starts at 0, non-decreasing.
    pub starts: Vec<usize>,
    pub ids: Vec<u32>,
}

impl BlockTables {
    /// Tables from one slice of block ids per sequence.
    pub fn from_tables<T: AsRef<[u32]>>(tables: &[T]) -> BlockTables {
        let mut starts = Vec::with_capacity(tables.len() + 1);
        let mut ids = Vec::with_capacity(tables.iter().map(|t| t.as_ref().len()).sum());
        starts.push(0);
        for t in tables {
            ids.extend_from_slice(t.as_ref());
            starts.push(ids.len());
        }
        BlockTables { starts, ids }
    }

    pub fn sequences(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Sequence `i`'s blocks.
    pub fn table(&self, i: usize) -> &[u32] {
        &self.ids[self.starts[i]..self.starts[i + 1]]
    }
}

impl KvSpec {
    /// A pool with the identity layout: `slots` sequences of up to
    /// `capacity` tokens, each owning its own blocks.
    pub fn contiguous(slots: usize, kv_heads: usize, head_dim: usize, capacity: usize) -> KvSpec {
        KvSpec {
            slots,
            kv_heads,
            head_dim,
            capacity,
            blocks: slots.saturating_mul(blocks_for(capacity)),
        }
    }

    /// Blocks a slot owns in the identity layout.
    pub fn blocks_per_slot(&self) -> usize {
        blocks_for(self.capacity)
    }

    /// Whether a batch without block tables can use this pool (it holds
    /// every slot's identity blocks).
    pub fn has_identity_layout(&self) -> bool {
        self.slots
            .checked_mul(self.blocks_per_slot())
            .is_some_and(|n| n <= self.blocks)
    }

    /// Elements of one block of K (or of V): every KV head's rows.
    pub fn block_elems(&self) -> usize {
        KV_BLOCK_ROWS * self.kv_heads * self.head_dim
    }
}

impl Batch {
    /// Checks that each sequence's slot holds exactly its history
    /// (`held(slot)` tokens) and that its new rows fit `capacity`: the KV
    /// append's precondition on every backend.
    pub fn check_kv_append(&self, held: impl Fn(usize) -> usize, capacity: usize) -> OpResult<()> {
        for i in 0..self.sequences() {
            let slot = self.slots[i];
            let held = held(slot);
            if held != self.history[i] {
                return Err(OpError::State {
                    slot,
                    detail: format!("holds {held} tokens, batch says {}", self.history[i]),
                });
            }
            if held + self.seq_len(i) > capacity {
                return Err(OpError::State {
                    slot,
                    detail: format!(
                        "{held} + {} tokens exceed the capacity {capacity}",
                        self.seq_len(i)
                    ),
                });
            }
        }
        Ok(())
    }

    /// This batch with `tables` as its sequences' block tables.
    pub fn with_blocks(mut self, tables: BlockTables) -> Batch {
        self.blocks = Some(tables);
        self
    }

    /// Every sequence's block table in `spec`'s pool, checked: the batch's
    /// own tables, or the identity layout when it carries none. Each table
    /// must cover the sequence's history and new rows, within the capacity,
    /// and name only blocks of the pool. That two sequences hold distinct
    /// blocks is the caller's (the engine's block pool's) contract.
    pub fn resolved_blocks(&self, op: &'static str, spec: &KvSpec) -> OpResult<BlockTables> {
        let n = self.sequences();
        let bad = |why: String| Err(OpError::shape(op, why));
        match &self.blocks {
            Some(t) => {
                if t.starts.len() != n + 1 || t.starts.first() != Some(&0) {
                    return bad(format!(
                        "{} block-table starts for {n} sequences (need n + 1 from 0)",
                        t.starts.len()
                    ));
                }
                if t.starts.windows(2).any(|w| w[1] < w[0]) || t.starts[n] != t.ids.len() {
                    return bad("block-table starts must rise to the id count".into());
                }
                if let Some(&id) = t.ids.iter().find(|&&id| id as usize >= spec.blocks) {
                    return bad(format!(
                        "block {id} outside the pool of {} blocks",
                        spec.blocks
                    ));
                }
                for i in 0..n {
                    let need = self.history[i] + self.seq_len(i);
                    let have = t.table(i).len() * KV_BLOCK_ROWS;
                    if need > spec.capacity || need > have {
                        return bad(format!(
                            "sequence {i} needs {need} rows: its table holds {have}, the \
                             capacity is {}",
                            spec.capacity
                        ));
                    }
                }
                Ok(t.clone())
            }
            None => {
                if !spec.has_identity_layout() {
                    return bad(format!(
                        "the KV pool of {} blocks is paged: the batch must carry block tables",
                        spec.blocks
                    ));
                }
                let per = spec.blocks_per_slot();
                let mut starts = Vec::with_capacity(n + 1);
                let mut ids = Vec::new();
                starts.push(0);
                for i in 0..n {
                    let need = self.history[i] + self.seq_len(i);
                    if need > spec.capacity {
                        return bad(format!(
                            "sequence {i} needs {need} rows, the capacity is {}",
                            spec.capacity
                        ));
                    }
                    let first = self.slots[i] * per;
                    ids.extend((first..first + blocks_for(need)).map(|b| b as u32));
                    starts.push(ids.len());
                }
                Ok(BlockTables { starts, ids })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(slots: usize, capacity: usize, blocks: usize) -> KvSpec {
        KvSpec {
            slots,
            kv_heads: 2,
            head_dim: 8,
            capacity,
            blocks,
        }
    }

    #[test]
    fn identity_tables_follow_the_slots() {
        let s = KvSpec::contiguous(4, 2, 8, 200);
        assert_eq!((s.blocks_per_slot(), s.blocks), (4, 16));
        let b = Batch::packed(&[(2, 0, 65), (0, 127, 1)]);
        let t = b.resolved_blocks("t", &s).unwrap();
        assert_eq!(t.table(0), &[8, 9]);
        assert_eq!(t.table(1), &[0, 1]);
        let over = Batch::packed(&[(1, 199, 2)]);
        assert!(over.resolved_blocks("t", &s).is_err(), "past the capacity");
    }

    #[test]
    fn a_kv_append_needs_the_history_held_and_room_for_the_rows() {
        let b = Batch::packed(&[(0, 3, 2), (2, 0, 5)]);
        let lens = [3usize, 9, 0];
        b.check_kv_append(|s| lens[s], 8).unwrap();
        let err = b.check_kv_append(|s| lens[s], 4).unwrap_err().to_string();
        assert!(
            err.contains("slot 0") && err.contains("3 + 2 tokens exceed the capacity 4"),
            "{err}"
        );
        let stale = [4usize, 9, 0];
        let err = b.check_kv_append(|s| stale[s], 8).unwrap_err().to_string();
        assert!(err.contains("holds 4 tokens, batch says 3"), "{err}");
    }

    #[test]
    fn given_tables_are_checked_against_the_pool_and_the_rows() {
        let s = spec(4, 1000, 10);
        assert!(!s.has_identity_layout());
        let b = Batch::packed(&[(0, 60, 10), (3, 0, 1)]);
        assert!(
            b.resolved_blocks("t", &s).is_err(),
            "a paged pool needs tables"
        );
        let ok = b
            .clone()
            .with_blocks(BlockTables::from_tables(&[vec![7, 2], vec![9]]));
        let t = ok.resolved_blocks("t", &s).unwrap();
        assert_eq!((t.table(0), t.table(1)), (&[7u32, 2][..], &[9u32][..]));
        let short = b
            .clone()
            .with_blocks(BlockTables::from_tables(&[vec![7], vec![9]]));
        let err = short.resolved_blocks("t", &s).unwrap_err().to_string();
        assert!(
            err.contains("needs 70 rows") && err.contains("holds 64"),
            "{err}"
        );
        let outside = b
            .clone()
            .with_blocks(BlockTables::from_tables(&[vec![7, 10], vec![9]]));
        assert!(outside.resolved_blocks("t", &s).is_err());
        let ragged = b.with_blocks(BlockTables {
            starts: vec![0, 2],
            ids: vec![1, 2],
        });
        assert!(ragged.resolved_blocks("t", &s).is_err());
    }
}
