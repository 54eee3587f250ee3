//! The state slot pool: one slot of every layer's state (the GDN conv +
//! recurrent state, and the per-slot KV length) per running sequence, taken
//! at admission (and reset there) and given back when the sequence
//! finishes, is cancelled or is preempted. Taking and giving back are O(1).

/// Free slot ids out of a fixed number.
#[derive(Debug, Clone)]
pub struct SlotPool {
    total: usize,
    /// Free ids; the next one taken is the last (at first the lowest).
    free: Vec<usize>,
    /// Whether each id is in `free`.
    is_free: Vec<bool>,
}

impl SlotPool {
    pub fn new(total: usize) -> SlotPool {
        SlotPool {
            total,
            free: (0..total).rev().collect(),
            is_free: vec![true; total],
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// A free slot (the one given back last, else the lowest), if any.
    pub fn take(&mut self) -> Option<usize> {
        let slot = self.free.pop()?;
        self.is_free[slot] = false;
        Some(slot)
    }

    /// Returns `slot` to the pool (ignored when out of range or already free).
    pub fn give(&mut self, slot: usize) {
        if slot < self.total && !self.is_free[slot] {
            self.is_free[slot] = true;
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_lowest_first_reuses_given_back_and_ignores_double_give() {
        let mut p = SlotPool::new(3);
        assert_eq!((p.take(), p.take()), (Some(0), Some(1)));
        p.give(0);
        p.give(0);
        p.give(9);
        assert_eq!(p.free(), 2);
        assert_eq!((p.take(), p.take(), p.take()), (Some(0), Some(2), None));
    }
}
