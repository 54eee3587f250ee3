//! Caching device allocator: freed blocks are handed out again without a
//! driver call, the lowest address first, so that the same sequence of
//! allocations gets the same blocks whatever order the previous ones were
//! freed in (a last-freed-first pool swapped equal-sized buffers between
//! every other run of the same step). Blocks under 1 MiB go back to a pool
//! keyed by their rounded size; larger ones are split from and merged back
//! into their driver segments ([`large`]), so steps of many sizes share
//! memory.
//!
//! It counts the bytes held by live buffers (`active`), their high-water
//! mark since the last [`Allocator::reset_peak`] (`peak`), what the driver
//! gave (`reserved`) and the driver calls: a bench's transient figure is the
//! peak during a call minus what was active before it.

mod large;

use crate::CudaError;
use large::LargeBlocks;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Where the pool gets memory from: the driver on a GPU, a fake in tests.
pub trait RawMemory: Send + Sync {
    fn malloc(&self, bytes: usize) -> Result<u64, CudaError>;
    fn free(&self, ptr: u64);
}

/// Counters of the pool, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocStats {
    /// Held by live buffers.
    pub active: u64,
    /// Highest `active` since the last reset.
    pub peak: u64,
    /// Obtained from the driver (active + cached).
    pub reserved: u64,
    /// Segments and small blocks obtained from the driver so far.
    pub driver_allocs: u64,
    /// Of them, given back to the driver.
    pub driver_frees: u64,
}

/// Sizes are rounded up to this granularity below [`LARGE`] bytes…
const SMALL_GRAIN: usize = 512;
/// …and to [`LARGE_GRAIN`] from there on.
const LARGE: usize = 1 << 20;
const LARGE_GRAIN: usize = 2 << 20;

fn rounded(bytes: usize) -> usize {
    let b = bytes.max(1);
    let g = if b < LARGE { SMALL_GRAIN } else { LARGE_GRAIN };
    b.div_ceil(g) * g
}

#[derive(Default)]
struct Pool {
    /// Free small blocks by rounded size.
    free: HashMap<usize, BTreeSet<u64>>,
    /// Large blocks, free and taken.
    large: LargeBlocks,
    /// Blocks freed while a step is recorded (`keep_cached` on): a recorded
    /// kernel may still write them when the graph runs, so a table copied
    /// ahead of the graph must not land in one ([`Allocator::alloc_untouched`]).
    touched: HashSet<u64>,
    stats: AllocStats,
}

pub struct Allocator {
    raw: Box<dyn RawMemory>,
    pool: Mutex<Pool>,
    /// Set while a step is recorded (`crate::graph`): the cached blocks may
    /// be named by recorded kernels not launched yet, so an allocation the
    /// driver refuses fails instead of releasing them.
    keep_cached: AtomicBool,
}

/// A device allocation; dropping it returns the block to the pool.
pub struct DeviceBuffer {
    ptr: u64,
    bytes: usize,
    size: usize,
    alloc: Arc<Allocator>,
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({:#x}, {} bytes)", self.ptr, self.bytes)
    }
}

impl DeviceBuffer {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    /// The bytes asked for.
    pub fn len_bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        self.alloc.give_back(self.ptr, self.size);
    }
}

impl Allocator {
    pub fn new(raw: Box<dyn RawMemory>) -> Arc<Self> {
        Arc::new(Allocator {
            raw,
            pool: Mutex::new(Pool::default()),
            keep_cached: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A buffer of at least `bytes` bytes (contents undefined).
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        self.alloc_from(bytes, false)
    }

    /// [`Self::alloc`] of a block not freed since the step being recorded
    /// began (the target of a copy queued ahead of its graph, `crate::graph`).
    pub(crate) fn alloc_untouched(
        self: &Arc<Self>,
        bytes: usize,
    ) -> Result<DeviceBuffer, CudaError> {
        self.alloc_from(bytes, true)
    }

    fn alloc_from(
        self: &Arc<Self>,
        bytes: usize,
        untouched: bool,
    ) -> Result<DeviceBuffer, CudaError> {
        let size = rounded(bytes);
        let large = size >= LARGE;
        let cached = {
            let mut pool = self.lock();
            let Pool {
                free,
                large: blocks,
                touched,
                ..
            } = &mut *pool;
            if large {
                blocks.take(size, LARGE_GRAIN, untouched, touched)
            } else {
                free.get_mut(&size).and_then(|v| {
                    let p = if untouched {
                        v.iter().copied().find(|p| !touched.contains(p))?
                    } else {
                        *v.first()?
                    };
                    v.remove(&p);
                    touched.remove(&p);
                    Some((p, size))
                })
            }
        };
        let (ptr, held) = match cached {
            Some(c) => c,
            None => {
                if large && !self.keep_cached.load(Ordering::Acquire) {
                    self.release_segments_below(size);
                }
                let fresh = match self.raw.malloc(size) {
                    Ok(p) => p,
                    Err(e) if self.keep_cached.load(Ordering::Acquire) => return Err(e),
                    Err(_) => {
                        // Out of memory with blocks cached: release them and try once more.
                        self.empty_cache();
                        self.raw.malloc(size)?
                    }
                };
                let mut pool = self.lock();
                pool.stats.reserved += size as u64;
                pool.stats.driver_allocs += 1;
                if large {
                    pool.large.add_taken_segment(fresh, size);
                }
                (fresh, size)
            }
        };
        let mut pool = self.lock();
        pool.stats.active += held as u64;
        pool.stats.peak = pool.stats.peak.max(pool.stats.active);
        Ok(DeviceBuffer {
            ptr,
            bytes,
            size: held,
            alloc: Arc::clone(self),
        })
    }

    fn give_back(&self, ptr: u64, size: usize) {
        let recording = self.keep_cached.load(Ordering::Acquire);
        let mut pool = self.lock();
        pool.stats.active -= size as u64;
        if size >= LARGE {
            pool.large.give_back(ptr, !recording);
        } else {
            pool.free.entry(size).or_default().insert(ptr);
        }
        if recording {
            pool.touched.insert(ptr);
        }
    }

    pub fn stats(&self) -> AllocStats {
        self.lock().stats
    }

    /// Starts a new high-water mark at the current active bytes.
    pub fn reset_peak(&self) {
        let mut pool = self.lock();
        pool.stats.peak = pool.stats.active;
    }

    /// While `on`, an allocation the driver refuses fails at once instead
    /// of releasing the cached blocks first (see `keep_cached`).
    pub(crate) fn keep_cached(&self, on: bool) {
        self.keep_cached.store(on, Ordering::Release);
        if !on {
            let mut pool = self.lock();
            pool.touched.clear();
            pool.large.merge_all();
        }
    }

    /// Returns the wholly free large segments shorter than `size` to the
    /// driver (a request of `size` found no free block that holds it).
    fn release_segments_below(&self, size: usize) {
        let segments = {
            let mut pool = self.lock();
            let drained = pool.large.drain_free_segments(size);
            for (_, len) in &drained {
                pool.stats.reserved -= *len as u64;
            }
            pool.stats.driver_frees += drained.len() as u64;
            drained
        };
        for (p, _) in segments {
            self.raw.free(p);
        }
    }

    /// Returns every cached (free) block to the driver.
    pub fn empty_cache(&self) {
        let small: Vec<u64> = {
            let mut pool = self.lock();
            if !self.keep_cached.load(Ordering::Acquire) {
                // Pieces freed while a step was recorded did not merge.
                pool.large.merge_all();
            }
            let drained: Vec<(usize, u64)> = pool
                .free
                .drain()
                .flat_map(|(s, v)| v.into_iter().map(move |p| (s, p)))
                .collect();
            for (s, _) in &drained {
                pool.stats.reserved -= *s as u64;
            }
            pool.stats.driver_frees += drained.len() as u64;
            drained.into_iter().map(|(_, p)| p).collect()
        };
        for p in small {
            self.raw.free(p);
        }
        // Every large segment that is one free block.
        self.release_segments_below(usize::MAX);
    }
}

/// An allocator over fake device memory handing out increasing addresses
/// (tests of what sits on the allocator: tables, held copies).
#[cfg(test)]
pub(crate) fn fake_allocator() -> Arc<Allocator> {
    struct Addresses(std::sync::atomic::AtomicU64);
    impl RawMemory for Addresses {
        fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
            Ok(0x1000 + self.0.fetch_add(bytes as u64, Ordering::SeqCst))
        }
        fn free(&self, _: u64) {}
    }
    Allocator::new(Box::new(Addresses(Default::default())))
}

impl Drop for Allocator {
    fn drop(&mut self) {
        self.empty_cache();
    }
}

#[cfg(test)]
#[path = "alloc_tests.rs"]
mod tests;
