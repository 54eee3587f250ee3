//! [`Lru`]: an intrusive least-recently-used order over the ids `0..n` (a
//! doubly linked list in two arrays): push as most recent, remove, and pop
//! the least recent, each O(1). The prefix cache's idle blocks and its
//! state snapshots are ordered by it.

/// An LRU order over a subset of `0..n` (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Lru {
    /// `prev[i]`, `next[i]` of each id; index `n` is the list's head/tail sentinel.
    prev: Vec<usize>,
    next: Vec<usize>,
    linked: Vec<bool>,
    len: usize,
}

impl Lru {
    /// An empty order over `0..n`.
    pub(crate) fn new(n: usize) -> Lru {
        Lru {
            prev: vec![n; n + 1],
            next: vec![n; n + 1],
            linked: vec![false; n],
            len: 0,
        }
    }

    fn sentinel(&self) -> usize {
        self.linked.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        self.linked.get(i).copied().unwrap_or(false)
    }

    /// Makes `i` the most recent (moving it when already in the order).
    pub(crate) fn push_back(&mut self, i: usize) {
        if i >= self.linked.len() {
            return;
        }
        self.remove(i);
        let s = self.sentinel();
        let last = self.prev[s];
        self.next[last] = i;
        self.prev[i] = last;
        self.next[i] = s;
        self.prev[s] = i;
        self.linked[i] = true;
        self.len += 1;
    }

    /// Takes `i` out of the order; false when it was not in it.
    pub(crate) fn remove(&mut self, i: usize) -> bool {
        if !self.contains(i) {
            return false;
        }
        let (p, n) = (self.prev[i], self.next[i]);
        self.next[p] = n;
        self.prev[n] = p;
        self.linked[i] = false;
        self.len -= 1;
        true
    }

    /// Takes out and returns the least recent id.
    pub(crate) fn pop_front(&mut self) -> Option<usize> {
        let first = self.next[self.sentinel()];
        if first == self.sentinel() {
            return None;
        }
        self.remove(first);
        Some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_least_recent_first_and_a_touch_moves_to_the_back() {
        let mut l = Lru::new(4);
        for i in [2, 0, 3] {
            l.push_back(i);
        }
        l.push_back(2);
        assert_eq!((l.len(), l.contains(1), l.contains(2)), (3, false, true));
        assert!(l.remove(3) && !l.remove(3) && !l.remove(9));
        l.push_back(9);
        assert_eq!(l.pop_front(), Some(0));
        assert_eq!(l.pop_front(), Some(2));
        assert_eq!((l.pop_front(), l.len()), (None, 0));
        l.push_back(1);
        assert_eq!(l.pop_front(), Some(1));
    }
}
