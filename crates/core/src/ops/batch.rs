//! The batch description every op takes: which rows of the packed activation
//! belong to which sequence, at which positions, in which state slot.
//!
//! Rows of all sequences are packed one after another (varlen, as
//! FlashAttention's `cu_seqlens`): sequence `i` owns rows
//! `cu_seqlens[i] .. cu_seqlens[i + 1]`, its state lives in slot `slots[i]`
//! of every per-layer state (KV cache, GDN state), and its first row sits at
//! absolute position `history[i]` (the tokens that slot already holds);
//! its KV rows are in the blocks of its block table (`blocks`).

use crate::ops::OpError;

/// One forward step's rows, sequences and state slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// `len() == sequences + 1`, starts at 0, non-decreasing.
    pub cu_seqlens: Vec<usize>,
    /// State slot of each sequence (distinct).
    pub slots: Vec<usize>,
    /// Tokens each sequence's slot held before this step (its first row's position).
    pub history: Vec<usize>,
    /// Each sequence's KV block table (paged KV); `None`: the identity
    /// layout, slot `s` owning its own blocks (see [`super::blocks`]).
    pub blocks: Option<super::BlockTables>,
}

impl Batch {
    /// One sequence of `len` rows in `slot`, after `history` cached tokens.
    pub fn single(slot: usize, history: usize, len: usize) -> Batch {
        Batch {
            cu_seqlens: vec![0, len],
            slots: vec![slot],
            history: vec![history],
            blocks: None,
        }
    }

    /// Packs sequences given as `(slot, history, len)`.
    pub fn packed(seqs: &[(usize, usize, usize)]) -> Batch {
        let mut cu = Vec::with_capacity(seqs.len() + 1);
        cu.push(0);
        for &(_, _, len) in seqs {
            cu.push(cu.last().copied().unwrap_or(0) + len);
        }
        Batch {
            cu_seqlens: cu,
            slots: seqs.iter().map(|s| s.0).collect(),
            history: seqs.iter().map(|s| s.1).collect(),
            blocks: None,
        }
    }

    pub fn sequences(&self) -> usize {
        self.slots.len()
    }

    /// Total rows of the packed activation.
    pub fn rows(&self) -> usize {
        self.cu_seqlens.last().copied().unwrap_or(0)
    }

    /// Rows of sequence `i`.
    pub fn seq_rows(&self, i: usize) -> std::ops::Range<usize> {
        self.cu_seqlens[i]..self.cu_seqlens[i + 1]
    }

    pub fn seq_len(&self, i: usize) -> usize {
        self.cu_seqlens[i + 1] - self.cu_seqlens[i]
    }

    /// The absolute position of every row (`history[i] + offset in the sequence`).
    pub fn positions(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.rows());
        for i in 0..self.sequences() {
            out.extend(self.history[i]..self.history[i] + self.seq_len(i));
        }
        out
    }

    /// The last row of each sequence (what generation reads logits from).
    pub fn last_rows(&self) -> Vec<usize> {
        (0..self.sequences())
            .map(|i| self.cu_seqlens[i + 1] - 1)
            .collect()
    }

    /// [`Batch::validate`], and that the batch covers exactly `rows` rows of
    /// the activation `op` is given (the backends' shared entry check).
    pub fn validate_rows(
        &self,
        op: &'static str,
        rows: usize,
        slots: usize,
    ) -> Result<(), OpError> {
        self.validate(slots)?;
        if self.rows() != rows {
            return Err(OpError::shape(
                op,
                format!("batch has {} rows, activation {rows}", self.rows()),
            ));
        }
        Ok(())
    }

    /// Checks the description's own consistency and that every slot is `< slots`.
    pub fn validate(&self, slots: usize) -> Result<(), OpError> {
        let n = self.slots.len();
        let bad = |why: String| Err(OpError::Batch(why));
        if self.cu_seqlens.len() != n + 1 || self.history.len() != n {
            return bad(format!(
                "{} cu_seqlens, {} slots, {} history entries (need n+1, n, n)",
                self.cu_seqlens.len(),
                n,
                self.history.len()
            ));
        }
        if n == 0 || self.cu_seqlens[0] != 0 {
            return bad("a batch needs at least one sequence and cu_seqlens[0] = 0".into());
        }
        if self.cu_seqlens.windows(2).any(|w| w[1] <= w[0]) {
            return bad("every sequence needs at least one row".into());
        }
        if let Some((i, &s)) = self.slots.iter().enumerate().find(|(_, &s)| s >= slots) {
            return bad(format!("slot {s} of sequence {i} >= {slots} slots"));
        }
        // Sorted copy: O(n log n) in the batch alone, whatever `slots` is
        // (callers without a pool pass usize::MAX).
        let mut sorted = self.slots.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return bad(format!("slot {} used by two sequences", w[0]));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_rows_positions_and_last_rows() {
        let b = Batch::packed(&[(3, 10, 2), (0, 0, 3)]);
        assert_eq!(b.cu_seqlens, vec![0, 2, 5]);
        assert_eq!(b.rows(), 5);
        assert_eq!(b.positions(), vec![10, 11, 0, 1, 2]);
        assert_eq!(b.last_rows(), vec![1, 4]);
        b.validate(4).unwrap();
        assert!(b.validate(3).is_err(), "slot 3 needs 4 slots");
    }

    #[test]
    fn rejects_empty_sequences_and_shared_slots() {
        assert!(Batch::packed(&[(0, 0, 0)]).validate(1).is_err());
        assert!(Batch::packed(&[(1, 0, 2), (1, 0, 2)]).validate(2).is_err());
        let mut b = Batch::single(0, 0, 4);
        b.history.clear();
        assert!(b.validate(1).is_err());
    }

    #[test]
    fn validate_rows_needs_the_batch_to_cover_the_activation() {
        let b = Batch::packed(&[(0, 0, 2), (1, 4, 3)]);
        b.validate_rows("rope", 5, 2).unwrap();
        let err = b.validate_rows("rope", 4, 2).unwrap_err().to_string();
        assert!(
            err.contains("rope") && err.contains("5 rows, activation 4"),
            "{err}"
        );
        assert!(
            b.validate_rows("rope", 5, 1).is_err(),
            "slot 1 needs 2 slots"
        );
    }

    #[test]
    fn shared_slots_are_found_anywhere_in_a_large_batch() {
        // 1,000 one-row sequences on slots 0..999 of a 1,024-slot pool.
        let seqs: Vec<(usize, usize, usize)> = (0..1000).map(|s| (s, 7, 1)).collect();
        Batch::packed(&seqs).validate(1024).unwrap();
        for (a, b) in [(0, 999), (63, 64), (998, 999), (500, 1)] {
            let mut dup = seqs.clone();
            dup[a].0 = dup[b].0;
            let err = Batch::packed(&dup).validate(1024).unwrap_err().to_string();
            assert!(err.contains("used by two sequences"), "{a} {b}: {err}");
        }
        // Slots past the pool are refused; without a pool (usize::MAX, as
        // the ops with no state pass) any slot number is fine but sharing is not.
        assert!(Batch::packed(&[(1024, 0, 1)]).validate(1024).is_err());
        assert!(Batch::packed(&[(64, 0, 1)]).validate(64).is_err());
        Batch::packed(&[(1 << 60, 0, 1), (3, 0, 2)])
            .validate(usize::MAX)
            .unwrap();
        assert!(Batch::packed(&[(1 << 60, 0, 1), (1 << 60, 0, 2)])
            .validate(usize::MAX)
            .is_err());
    }
}
