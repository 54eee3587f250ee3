//! Splitting one call into independent tasks: (KV head, block of query rows),
//! each writing the output rows of every query head in the KV head's group.
//!
//! Tasks are plain indices (no allocation, so the workspace report holds only
//! numerical buffers); [`OutRows`] hands each task its disjoint output rows.

use headroom_core::AttentionShape;
use std::marker::PhantomData;

/// The tasks of one call: `kv_heads × blocks` blocks of `rows` query rows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    pub rows: usize,
    pub blocks: usize,
    pub kv_heads: usize,
    pub q_len: usize,
}

/// One unit of parallel work: query rows `r0..r1` of every head of `kv_head`'s group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Task {
    pub kv_head: usize,
    pub r0: usize,
    pub r1: usize,
}

impl Grid {
    pub(crate) fn new(shape: &AttentionShape, rows: usize) -> Grid {
        let rows = rows.clamp(1, shape.q_len);
        Grid {
            rows,
            blocks: shape.q_len.div_ceil(rows),
            kv_heads: shape.kv_heads,
            q_len: shape.q_len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.kv_heads * self.blocks
    }

    /// Task `idx`; the heaviest blocks (latest rows, most keys) come first.
    pub(crate) fn task(&self, idx: usize) -> Task {
        let b = self.blocks - 1 - idx / self.kv_heads;
        Task {
            kv_head: idx % self.kv_heads,
            r0: b * self.rows,
            r1: ((b + 1) * self.rows).min(self.q_len),
        }
    }
}

/// Shared write access to the output, one disjoint task region at a time.
pub(crate) struct OutRows<'o, T> {
    ptr: *mut T,
    len: usize,
    q_len: usize,
    head_dim: usize,
    _out: PhantomData<&'o mut [T]>,
}

// SAFETY: `OutRows` is only a way to reach disjoint parts of one `&mut [T]`
// from several threads; `T: Send` is what moving writes across threads needs.
unsafe impl<T: Send> Sync for OutRows<'_, T> {}
unsafe impl<T: Send> Send for OutRows<'_, T> {}

impl<'o, T> OutRows<'o, T> {
    pub(crate) fn new(shape: &AttentionShape, out: &'o mut [T]) -> Self {
        assert_eq!(out.len(), shape.q_elems());
        OutRows {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            q_len: shape.q_len,
            head_dim: shape.head_dim,
            _out: PhantomData,
        }
    }

    /// Rows `r0..r1` of query head `head`.
    ///
    /// # Safety
    /// No two live results may overlap: each (head, row range) must be taken
    /// by one task only. A [`Grid`]'s tasks partition the rows, and a task
    /// takes each head of its group once.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn rows(&self, head: usize, r0: usize, r1: usize) -> &mut [T] {
        let start = (head * self.q_len + r0) * self.head_dim;
        let n = (r1 - r0) * self.head_dim;
        assert!(
            r0 <= r1 && r1 <= self.q_len && start + n <= self.len,
            "rows out of range"
        );
        // SAFETY: in bounds (asserted); disjointness is the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_partition_every_row_of_every_kv_head() {
        let shape = AttentionShape {
            q_len: 7,
            kv_len: 9,
            q_heads: 4,
            kv_heads: 2,
            head_dim: 2,
            scale: None,
        };
        let grid = Grid::new(&shape, 3);
        assert_eq!(grid.len(), 2 * 3);
        assert_eq!(grid.task(0).r1, 7, "heaviest first");
        let mut seen = vec![0u32; shape.kv_heads * shape.q_len];
        for idx in 0..grid.len() {
            let t = grid.task(idx);
            assert!(t.r0 < t.r1 && t.r1 - t.r0 <= 3);
            for r in t.r0..t.r1 {
                seen[t.kv_head * shape.q_len + r] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "{seen:?}");
        assert_eq!(Grid::new(&shape, 0).rows, 1);
        assert_eq!(Grid::new(&shape, 100).blocks, 1);
    }

    #[test]
    fn out_rows_addresses_head_major_rows() {
        let shape = AttentionShape {
            q_len: 3,
            kv_len: 3,
            q_heads: 2,
            kv_heads: 1,
            head_dim: 2,
            scale: None,
        };
        let mut out = vec![0u8; 12];
        let rows = OutRows::new(&shape, &mut out);
        // SAFETY: the two regions are disjoint.
        unsafe {
            rows.rows(1, 1, 3).fill(7);
            rows.rows(0, 0, 1).fill(1);
        }
        assert_eq!(out, [1, 1, 0, 0, 0, 0, 0, 0, 7, 7, 7, 7]);
    }
}
