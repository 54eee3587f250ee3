//! KV cache management: the KV backend factory ([`resolve_kv`]: the backend
//! requested, the one resolved, and why they differ). The block pool behind
//! each sequence's block table (blocks of [`KV_BLOCK_ROWS`] rows, the fused
//! kernel's KV tile) is [`crate::prefix::BlockPool`].
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
}
