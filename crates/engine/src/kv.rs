//! KV cache management: the KV backend factory ([`resolve_kv`]: the backend
//! requested, the one resolved, and why they differ) and the block
//! allocator ([`BlockAllocator`]) that hands out blocks of
//! [`KV_BLOCK_ROWS`] rows (the fused kernel's KV tile) through per-sequence
//! block tables.
//!
//! * **contiguous**: a sequence's blocks for prompt + max tokens are taken
//!   at admission (its slot's rows, reserved up front).
//! * **paged**: blocks are taken as the sequence's rows are written and
//!   given back when it ends; admission still counts each sequence's worst
//!   case so a running sequence never waits for a block (no preemption).
//!
//! The backends' attention reads each slot's rows contiguously today (the op
//! set has no block-table argument yet), so under **paged** the rows are
//! still *stored* per slot: the blocks are the unit of accounting and
//! admission only. [`KvResolution::storage`] and its reason say so.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Rows per KV block: the fused attention kernel's KV tile.
pub const KV_BLOCK_ROWS: usize = 64;

/// A KV cache backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvBackendKind {
    #[default]
    Contiguous,
    Paged,
}

impl std::fmt::Display for KvBackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KvBackendKind::Contiguous => "contiguous",
            KvBackendKind::Paged => "paged",
        })
    }
}

impl std::str::FromStr for KvBackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "contiguous" => Ok(KvBackendKind::Contiguous),
            "paged" => Ok(KvBackendKind::Paged),
            other => Err(format!(
                "unknown KV backend `{other}` (expected contiguous or paged)"
            )),
        }
    }
}

/// Where the KV rows physically live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum KvStorage {
    /// Each sequence's rows contiguous in its slot.
    #[default]
    PerSlot,
    /// Rows in shared blocks read through block tables.
    Blocks,
}

/// What the KV factory resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct KvResolution {
    pub requested: KvBackendKind,
    pub resolved: KvBackendKind,
    pub storage: KvStorage,
    pub block_rows: usize,
    /// Why the resolved backend or its storage differs from what was asked.
    pub reason: Option<String>,
}

impl std::fmt::Display for KvResolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "kv {} (requested {}, storage {:?}, blocks of {} rows)",
            self.resolved, self.requested, self.storage, self.block_rows
        )?;
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        Ok(())
    }
}

/// The KV factory: resolves `requested` on a backend named `backend` whose
/// attention can (`block_table_attention`) or cannot read block tables.
pub fn resolve_kv(
    requested: KvBackendKind,
    backend: &str,
    block_table_attention: bool,
) -> KvResolution {
    let (storage, reason) = match requested {
        KvBackendKind::Contiguous => (KvStorage::PerSlot, None),
        KvBackendKind::Paged if block_table_attention => (KvStorage::Blocks, None),
        KvBackendKind::Paged => (
            KvStorage::PerSlot,
            Some(format!(
                "the {backend} backend's attention cannot read block tables yet: KV is allocated, \
                 accounted and admitted in blocks of {KV_BLOCK_ROWS} rows, but each sequence's rows \
                 are stored contiguously in its slot (no paged storage)"
            )),
        ),
    };
    KvResolution {
        requested,
        resolved: requested,
        storage,
        block_rows: KV_BLOCK_ROWS,
        reason,
    }
}

/// Blocks needed for `rows` rows.
pub fn blocks_for(rows: usize) -> usize {
    rows.div_ceil(KV_BLOCK_ROWS)
}

/// Not enough free blocks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("KV blocks exhausted: need {need}, {free} free")]
pub struct OutOfBlocks {
    pub need: usize,
    pub free: usize,
}

/// A fixed pool of KV blocks and the block table of each sequence.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    total: usize,
    /// Free block ids, the lowest last (popped first).
    free: Vec<u32>,
    tables: HashMap<u64, Vec<u32>>,
}

impl BlockAllocator {
    /// A pool of `total` blocks (bounded by `u32` ids).
    pub fn new(total: usize) -> BlockAllocator {
        let total = total.min(u32::MAX as usize);
        BlockAllocator {
            total,
            free: (0..total as u32).rev().collect(),
            tables: HashMap::new(),
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn free(&self) -> usize {
        self.free.len()
    }

    pub fn used(&self) -> usize {
        self.total - self.free.len()
    }

    /// The block table of sequence `seq` (empty when it holds none).
    pub fn table(&self, seq: u64) -> &[u32] {
        self.tables.get(&seq).map_or(&[], |t| &t[..])
    }

    /// Makes `seq`'s table cover `rows` rows, taking blocks as needed; on
    /// failure nothing is taken.
    pub fn ensure(&mut self, seq: u64, rows: usize) -> Result<(), OutOfBlocks> {
        let have = self.table(seq).len();
        let need = blocks_for(rows).saturating_sub(have);
        if need > self.free.len() {
            return Err(OutOfBlocks {
                need,
                free: self.free.len(),
            });
        }
        let at = self.free.len() - need;
        let taken: Vec<u32> = self.free.drain(at..).rev().collect();
        self.tables.entry(seq).or_default().extend(taken);
        Ok(())
    }

    /// Gives back every block of `seq`; returns how many.
    pub fn release(&mut self, seq: u64) -> usize {
        let Some(table) = self.tables.remove(&seq) else {
            return 0;
        };
        let n = table.len();
        self.free.extend(table);
        self.free.sort_unstable_by(|a, b| b.cmp(a));
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_reports_per_slot_storage_for_paged_without_block_table_attention() {
        let c = resolve_kv(KvBackendKind::Contiguous, "cpu", false);
        assert_eq!(
            (c.resolved, c.storage, c.reason.is_none()),
            (KvBackendKind::Contiguous, KvStorage::PerSlot, true)
        );
        let p = resolve_kv(KvBackendKind::Paged, "cpu", false);
        assert_eq!(
            (p.resolved, p.storage),
            (KvBackendKind::Paged, KvStorage::PerSlot)
        );
        let why = p.reason.as_deref().unwrap();
        assert!(why.contains("cannot read block tables") && why.contains("no paged storage"));
        assert!(p.to_string().contains("requested paged"));
        let real = resolve_kv(KvBackendKind::Paged, "x", true);
        assert_eq!((real.storage, real.reason), (KvStorage::Blocks, None));
        assert_eq!("Paged".parse::<KvBackendKind>(), Ok(KvBackendKind::Paged));
        assert!("blocks".parse::<KvBackendKind>().is_err());
    }

    #[test]
    fn blocks_are_taken_by_rows_and_given_back() {
        let mut a = BlockAllocator::new(5);
        a.ensure(1, 1).unwrap();
        assert_eq!((a.used(), a.table(1)), (1, &[0u32][..]));
        a.ensure(1, 64).unwrap();
        assert_eq!(a.used(), 1, "64 rows fit one block");
        a.ensure(1, 65).unwrap();
        a.ensure(2, 128).unwrap();
        assert_eq!((a.used(), a.free()), (4, 1));
        assert_eq!(a.ensure(3, 129), Err(OutOfBlocks { need: 3, free: 1 }));
        assert_eq!(a.used(), 4, "a failed ensure takes nothing");
        assert_eq!(a.release(1), 2);
        assert_eq!(a.release(1), 0);
        assert_eq!(a.free(), 3);
        a.ensure(3, 129).unwrap();
        let mut t = a.table(3).to_vec();
        t.extend(a.table(2));
        t.sort();
        t.dedup();
        assert_eq!(t.len(), 5, "no block is in two tables");
    }
}
