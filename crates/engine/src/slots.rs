//! The state slot pool: one slot of every layer's state (KV rows and the
//! GDN conv + recurrent state) per running sequence, taken at admission
//! (and reset there) and given back when the sequence finishes or is cancelled.

/// Free slot ids out of a fixed number.
#[derive(Debug, Clone)]
pub struct SlotPool {
    total: usize,
    /// Free ids, the lowest last (taken first).
    free: Vec<usize>,
}

impl SlotPool {
    pub fn new(total: usize) -> SlotPool {
        SlotPool {
            total,
            free: (0..total).rev().collect(),
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// The lowest free slot, if any.
    pub fn take(&mut self) -> Option<usize> {
        self.free.pop()
    }

    /// Returns `slot` to the pool (ignored when out of range or already free).
    pub fn give(&mut self, slot: usize) {
        if slot < self.total && !self.free.contains(&slot) {
            self.free.push(slot);
            self.free.sort_unstable_by(|a, b| b.cmp(a));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_lowest_and_ignores_double_give() {
        let mut p = SlotPool::new(3);
        assert_eq!((p.take(), p.take()), (Some(0), Some(1)));
        p.give(0);
        p.give(0);
        p.give(9);
        assert_eq!(p.free(), 2);
        assert_eq!((p.take(), p.take(), p.take()), (Some(0), Some(2), None));
    }
}
