//! KV cache management: the KV backend factory ([`resolve_kv`]: the backend
//! requested, the one resolved, and why they differ) and the block
//! allocator ([`BlockAllocator`]: an O(1) free list of block ids) behind
//! each sequence's block table (blocks of [`KV_BLOCK_ROWS`] rows, the fused
//! kernel's KV tile).
//!
//! * **paged** (the default): the model's KV is a pool of blocks shared by
//!   every sequence; a sequence takes blocks as its rows are written (before
//!   the step that writes them) and gives them back when it ends or is
//!   preempted; every step's `Batch` carries the tables.
//! * **contiguous**: the identity layout (slot `s` owns its own blocks);
//!   a sequence's blocks for prompt + max tokens are counted at admission.
//!
//! Both backends (CPU and CUDA) store the rows in the pool's blocks and
//! read them through the tables ([`KvResolution::storage`] says which).

pub use headroom_core::ops::{blocks_for, KV_BLOCK_ROWS};
use serde::{Deserialize, Serialize};

/// A KV cache backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KvBackendKind {
    Contiguous,
    #[default]
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

/// The KV factory: what `requested` resolves to. Every backend stores a
/// paged pool's rows in its blocks and reads them through the batch's
/// tables; contiguous is the identity layout.
pub fn resolve_kv(requested: KvBackendKind) -> KvResolution {
    let storage = match requested {
        KvBackendKind::Contiguous => KvStorage::PerSlot,
        KvBackendKind::Paged => KvStorage::Blocks,
    };
    KvResolution {
        requested,
        resolved: requested,
        storage,
        block_rows: KV_BLOCK_ROWS,
        reason: None,
    }
}

/// Not enough free blocks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("KV blocks exhausted: need {need}, {free} free")]
pub struct OutOfBlocks {
    pub need: usize,
    pub free: usize,
}

/// A fixed pool of KV block ids: a free list (a stack), so taking and
/// giving back a block is O(1). Each sequence keeps its own block table
/// (a `Vec<u32>` in token order); the allocator only hands ids out and takes
/// them back, and never sees two tables at once.
#[derive(Debug, Clone)]
pub struct BlockAllocator {
    total: usize,
    /// Free block ids; the next one taken is the last.
    free: Vec<u32>,
}

impl BlockAllocator {
    /// A pool of `total` blocks (bounded by `u32` ids).
    pub fn new(total: usize) -> BlockAllocator {
        let total = total.min(u32::MAX as usize);
        BlockAllocator {
            total,
            free: (0..total as u32).rev().collect(),
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

    /// Makes `table` cover `rows` token rows, taking blocks as needed (O(1)
    /// each); on failure nothing is taken.
    pub fn ensure(&mut self, table: &mut Vec<u32>, rows: usize) -> Result<(), OutOfBlocks> {
        let need = blocks_for(rows).saturating_sub(table.len());
        if need > self.free.len() {
            return Err(OutOfBlocks {
                need,
                free: self.free.len(),
            });
        }
        for _ in 0..need {
            table.push(self.free.pop().expect("counted above"));
        }
        Ok(())
    }

    /// Gives back every block of `table` (left empty); returns how many.
    pub fn release(&mut self, table: &mut Vec<u32>) -> usize {
        let n = table.len();
        self.free.append(table);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paged_is_stored_in_blocks_and_contiguous_per_slot() {
        let c = resolve_kv(KvBackendKind::Contiguous);
        assert_eq!(
            (c.resolved, c.storage, c.reason.is_none()),
            (KvBackendKind::Contiguous, KvStorage::PerSlot, true)
        );
        let p = resolve_kv(KvBackendKind::Paged);
        assert_eq!((p.storage, p.reason.is_none()), (KvStorage::Blocks, true));
        assert!(p.to_string().contains("requested paged"));
        assert_eq!("Paged".parse::<KvBackendKind>(), Ok(KvBackendKind::Paged));
        assert!("blocks".parse::<KvBackendKind>().is_err());
    }

    #[test]
    fn blocks_are_taken_by_rows_and_given_back() {
        let mut a = BlockAllocator::new(5);
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
        assert_eq!(a.free(), 3);
        a.ensure(&mut t3, 129).unwrap();
        let mut t = t3.clone();
        t.extend(&t2);
        t.sort();
        t.dedup();
        assert_eq!(t.len(), 5, "no block is in two tables");
        assert!(t.iter().all(|&b| b < 5));
    }
}
