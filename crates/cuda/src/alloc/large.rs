//! The caching allocator's large blocks (1 MiB and up): each driver
//! allocation is a segment; a request takes the smallest free block that
//! holds it (the lowest address among equal sizes), split when the rest is
//! at least a grain; a freed block merges with its free neighbours of the
//! same segment. So a serving load's steps of many sizes reuse one another's
//! memory instead of each size keeping its own blocks (session 29 measured
//! 3.7 GiB cached above the live peak on an H100 with exact-size reuse).
//!
//! A request no free block holds first gives the driver back the wholly
//! free segments shorter than itself (none of them could serve it), so the
//! cache does not grow by one segment per new size; only then does it ask
//! the driver for a segment of its own.
//!
//! While a step is recorded (`touched` given) freed blocks do not merge and
//! a split of a touched block leaves its rest touched: a recorded kernel may
//! still write anywhere in it when the graph runs.

use std::collections::{BTreeMap, BTreeSet, HashSet};

/// One block of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Block {
    size: usize,
    /// The base address of its segment.
    segment: u64,
    free: bool,
}

/// Every large block, by address, and the free ones by (size, address).
#[derive(Default)]
pub(super) struct LargeBlocks {
    blocks: BTreeMap<u64, Block>,
    free: BTreeSet<(usize, u64)>,
    /// Segment base -> its length (what the driver handed out).
    segments: BTreeMap<u64, usize>,
}

impl LargeBlocks {
    /// A free block of at least `size` bytes taken (split to `size` where the
    /// rest is at least `grain`): its address and the bytes it now holds.
    /// With `untouched`, blocks in `touched` are passed over
    /// (`alloc_untouched`); a split of a touched block leaves its rest
    /// touched, and the block taken leaves the set (as a small one does).
    pub(super) fn take(
        &mut self,
        size: usize,
        grain: usize,
        untouched: bool,
        touched: &mut HashSet<u64>,
    ) -> Option<(u64, usize)> {
        let &(have, ptr) = self
            .free
            .range((size, 0)..)
            .find(|(_, p)| !untouched || !touched.contains(p))?;
        self.free.remove(&(have, ptr));
        let block = self.blocks.get_mut(&ptr).expect("a free block is a block");
        block.free = false;
        let mut held = have;
        if have - size >= grain {
            block.size = size;
            held = size;
            let rest = ptr + size as u64;
            let segment = block.segment;
            self.blocks.insert(
                rest,
                Block {
                    size: have - size,
                    segment,
                    free: true,
                },
            );
            self.free.insert((have - size, rest));
            if touched.contains(&ptr) {
                touched.insert(rest);
            }
        }
        touched.remove(&ptr);
        Some((ptr, held))
    }

    /// A new segment from the driver, wholly taken.
    pub(super) fn add_taken_segment(&mut self, ptr: u64, size: usize) {
        self.segments.insert(ptr, size);
        self.blocks.insert(
            ptr,
            Block {
                size,
                segment: ptr,
                free: false,
            },
        );
    }

    /// Returns a taken block; it merges with free neighbours of its segment
    /// unless `merge` is off (a step being recorded).
    pub(super) fn give_back(&mut self, ptr: u64, merge: bool) {
        let block = self.blocks.get_mut(&ptr).expect("a taken block");
        debug_assert!(!block.free, "double free of {ptr:#x}");
        block.free = true;
        let (mut start, mut size) = (ptr, block.size);
        if merge {
            (start, size) = self.merged(ptr);
        }
        self.free.insert((size, start));
    }

    /// Merges the free block at `ptr` (not in `free`) with its free
    /// neighbours of the same segment: the merged block's address and size.
    fn merged(&mut self, ptr: u64) -> (u64, usize) {
        let me = self.blocks[&ptr];
        let (mut start, mut size) = (ptr, me.size);
        let next = ptr + me.size as u64;
        if let Some(n) = self.blocks.get(&next).copied() {
            if n.free && n.segment == me.segment {
                self.free.remove(&(n.size, next));
                self.blocks.remove(&next);
                size += n.size;
            }
        }
        if let Some((&p, &b)) = self.blocks.range(..ptr).next_back() {
            if b.free && b.segment == me.segment && p + b.size as u64 == ptr {
                self.free.remove(&(b.size, p));
                self.blocks.remove(&ptr);
                start = p;
                size += b.size;
            }
        }
        self.blocks.get_mut(&start).expect("merged block").size = size;
        (start, size)
    }

    /// Merges every free block with its free neighbours (after a recording,
    /// during which frees did not merge).
    pub(super) fn merge_all(&mut self) {
        let free: Vec<u64> = self.free.iter().map(|&(_, p)| p).collect();
        for p in free {
            let Some(b) = self.blocks.get(&p).copied() else {
                continue; // merged into its lower neighbour already
            };
            if !self.free.remove(&(b.size, p)) {
                continue;
            }
            let (start, size) = self.merged(p);
            self.free.insert((size, start));
        }
    }

    /// Takes out every segment shorter than `below` bytes that is one free
    /// block: their (base, length), for the driver to free.
    pub(super) fn drain_free_segments(&mut self, below: usize) -> Vec<(u64, usize)> {
        let whole: Vec<(u64, usize)> = self
            .segments
            .iter()
            .filter(|&(&base, &len)| {
                len < below
                    && self
                        .blocks
                        .get(&base)
                        .is_some_and(|b| b.free && b.size == len)
            })
            .map(|(&b, &l)| (b, l))
            .collect();
        for &(base, len) in &whole {
            self.segments.remove(&base);
            self.blocks.remove(&base);
            self.free.remove(&(len, base));
        }
        whole
    }

    /// Driver segments held.
    #[cfg(test)]
    pub(super) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Free bytes held in blocks (what the cache keeps).
    #[cfg(test)]
    pub(super) fn free_bytes(&self) -> usize {
        self.free.iter().map(|&(s, _)| s).sum()
    }
}
