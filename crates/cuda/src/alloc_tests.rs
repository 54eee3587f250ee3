//! Tests of alloc.rs: the pools' reuse, splits and merges, the driver calls
//! and the statistics, on a fake device memory.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Hands out increasing fake addresses and counts driver calls.
#[derive(Default)]
struct Fake {
    next: AtomicU64,
    mallocs: Arc<AtomicU64>,
    frees: Arc<AtomicU64>,
}
impl RawMemory for Fake {
    fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
        self.mallocs.fetch_add(1, Ordering::SeqCst);
        Ok(0x1000 + self.next.fetch_add(bytes as u64, Ordering::SeqCst))
    }
    fn free(&self, _ptr: u64) {
        self.frees.fetch_add(1, Ordering::SeqCst);
    }
}

fn fake() -> (Arc<Allocator>, Arc<AtomicU64>, Arc<AtomicU64>) {
    let f = Fake::default();
    let (m, fr) = (Arc::clone(&f.mallocs), Arc::clone(&f.frees));
    (Allocator::new(Box::new(f)), m, fr)
}

#[test]
fn reuses_freed_blocks_of_the_same_rounded_size() {
    let (a, mallocs, _) = fake();
    let p = a.alloc(1000).unwrap().ptr();
    let again = a.alloc(900).unwrap(); // rounds to the same 1024-byte block
    assert_eq!(again.ptr(), p);
    assert_eq!(mallocs.load(Ordering::SeqCst), 1);
    let _other = a.alloc(5000).unwrap();
    assert_eq!(mallocs.load(Ordering::SeqCst), 2);
}

#[test]
fn hands_out_the_lowest_free_address_whatever_the_free_order() {
    let (a, mallocs, _) = fake();
    let run = |a: &Arc<Allocator>, free_first: bool| -> Vec<u64> {
        let bufs: Vec<DeviceBuffer> = (0..4).map(|_| a.alloc(3 << 20).unwrap()).collect();
        let ptrs = bufs.iter().map(|b| b.ptr()).collect();
        // Free in allocation order, or in reverse: the next run's blocks
        // must not depend on it.
        let mut bufs = bufs;
        if !free_first {
            bufs.reverse();
        }
        for b in bufs {
            drop(b);
        }
        ptrs
    };
    let first = run(&a, true);
    assert!(first.windows(2).all(|w| w[0] < w[1]), "fresh blocks ascend");
    assert_eq!(run(&a, false), first);
    assert_eq!(run(&a, true), first);
    assert_eq!(run(&a, false), first);
    assert_eq!(mallocs.load(Ordering::SeqCst), 4, "every later run reuses");
    // Blocks 1 and 3 freed (3 last): block 1, the lower, goes first.
    let mut bufs: Vec<Option<DeviceBuffer>> =
        (0..4).map(|_| Some(a.alloc(3 << 20).unwrap())).collect();
    let low = first[1];
    bufs[1] = None;
    bufs[3] = None;
    assert_eq!(a.alloc(3 << 20).unwrap().ptr(), low);
}

#[test]
fn tracks_active_and_peak_and_resets_the_peak() {
    let (a, _, frees) = fake();
    let x = a.alloc(3 << 20).unwrap(); // 4 MiB after rounding
    a.reset_peak();
    {
        let _t1 = a.alloc(1 << 20).unwrap(); // 2 MiB
        let _t2 = a.alloc(100).unwrap(); // 512 B
        assert_eq!(a.stats().active, (4 << 20) + (2 << 20) + 512);
    }
    let s = a.stats();
    assert_eq!(s.active, 4 << 20);
    assert_eq!(
        s.peak - (4 << 20),
        (2 << 20) + 512,
        "transient = peak - active before"
    );
    assert_eq!(s.reserved, (6 << 20) + 512);
    a.reset_peak();
    assert_eq!(a.stats().peak, 4 << 20);
    drop(x);
    a.empty_cache();
    assert_eq!(frees.load(Ordering::SeqCst), 3);
    assert_eq!(a.stats().reserved, 0);
}

/// Refuses any allocation that would take more than `limit` bytes in all.
struct Limited {
    limit: u64,
    /// Live blocks by address: their sizes.
    used: Mutex<HashMap<u64, u64>>,
    frees: Arc<AtomicU64>,
}
impl RawMemory for Limited {
    fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
        let mut used = self.used.lock().unwrap();
        let total: u64 = used.values().sum();
        if total + bytes as u64 > self.limit {
            return Err(CudaError::Driver("out of memory".into()));
        }
        let ptr = 0x1000 + used.keys().max().map_or(0, |p| p + (8 << 20));
        used.insert(ptr, bytes as u64);
        Ok(ptr)
    }
    fn free(&self, ptr: u64) {
        self.used.lock().unwrap().remove(&ptr);
        self.frees.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn while_keeping_the_cache_a_refused_allocation_fails_and_releases_nothing() {
    let frees = Arc::new(AtomicU64::new(0));
    let a = Allocator::new(Box::new(Limited {
        limit: 6 << 20,
        used: Mutex::new(HashMap::new()),
        frees: Arc::clone(&frees),
    }));
    drop(a.alloc(3 << 20).unwrap()); // 4 MiB cached
    a.keep_cached(true);
    // 6 MiB: more than the cached block holds, and 4 + 6 over the limit.
    assert!(a.alloc(5 << 20).is_err(), "no room and nothing released");
    assert_eq!(frees.load(Ordering::SeqCst), 0);
    assert_eq!(a.stats().reserved, 4 << 20);
    a.keep_cached(false);
    assert!(a.alloc(5 << 20).is_ok(), "released, then allocated");
    assert_eq!(frees.load(Ordering::SeqCst), 1);
}

#[test]
fn a_table_target_while_recording_is_no_block_freed_during_the_recording() {
    let (a, _, _) = fake();
    let before = a.alloc(1000).unwrap().ptr(); // freed before the recording
    a.keep_cached(true);
    let act = a.alloc(1000).unwrap();
    assert_eq!(act.ptr(), before, "activations reuse what was freed before");
    drop(act); // freed while recording: a recorded kernel wrote it
    let table = a.alloc_untouched(1000).unwrap();
    assert_ne!(table.ptr(), before, "not a block the recording touched");
    assert_eq!(
        a.alloc(1000).unwrap().ptr(),
        before,
        "activations still may"
    );
    a.keep_cached(false);
    drop(table);
    let after = a.alloc_untouched(1000).unwrap();
    assert_eq!(
        after.ptr(),
        before,
        "the recording over: every free block again"
    );
}

const MIB: usize = 1 << 20;

#[test]
fn a_larger_free_block_is_split_and_merges_back_into_its_segment() {
    let (a, mallocs, frees) = fake();
    let base = a.alloc(8 * MIB).unwrap().ptr(); // freed: one 8 MiB segment cached
    let x = a.alloc(2 * MIB).unwrap();
    let y = a.alloc(4 * MIB).unwrap();
    assert_eq!((x.ptr(), y.ptr()), (base, base + 2 * MIB as u64));
    assert_eq!(
        mallocs.load(Ordering::SeqCst),
        1,
        "both split from the cached segment"
    );
    let s = a.stats();
    assert_eq!((s.active, s.reserved), (6 << 20, 8 << 20));
    // Freed in either order, the pieces merge back: the whole segment again.
    drop(y);
    drop(x);
    let whole = a.alloc(8 * MIB).unwrap();
    assert_eq!(whole.ptr(), base);
    assert_eq!(mallocs.load(Ordering::SeqCst), 1);
    drop(whole);
    a.empty_cache();
    assert_eq!(
        frees.load(Ordering::SeqCst),
        1,
        "one segment, one driver free"
    );
    assert_eq!(a.stats().reserved, 0);
}

#[test]
fn the_smallest_free_block_that_holds_a_request_is_taken() {
    let (a, mallocs, _) = fake();
    let big = a.alloc(16 * MIB).unwrap();
    let small = a.alloc(6 * MIB).unwrap();
    let small_at = small.ptr();
    drop(big);
    drop(small);
    let x = a.alloc(4 * MIB).unwrap();
    assert_eq!(x.ptr(), small_at, "the 6 MiB block, not the 16 MiB one");
    assert_eq!(mallocs.load(Ordering::SeqCst), 2);
    // A rest under a grain stays with the block taken.
    let y = a.alloc(15 * MIB).unwrap(); // rounds to 16 MiB: the whole big block
    assert_eq!(a.stats().active, (4 + 16) << 20);
    drop(y);
    drop(x);
}

#[test]
fn emptying_the_cache_merges_what_a_recording_left_apart_and_frees_it() {
    let (a, _, frees) = fake();
    let x = a.alloc(8 * MIB).unwrap();
    drop(x);
    a.keep_cached(true);
    let p = a.alloc(2 * MIB).unwrap();
    let q = a.alloc(2 * MIB).unwrap();
    drop(p);
    drop(q); // freed while recording: three free pieces of one segment
    a.keep_cached.store(false, Ordering::Release); // as a recording that ended without its pass
    a.empty_cache();
    assert_eq!(frees.load(Ordering::SeqCst), 1);
    assert_eq!(a.stats().reserved, 0);
}

#[test]
fn blocks_of_different_segments_never_merge() {
    // The fake hands out adjacent addresses: two segments side by side.
    let (a, mallocs, _) = fake();
    let p = a.alloc(4 * MIB).unwrap();
    let q = a.alloc(4 * MIB).unwrap();
    assert_eq!(q.ptr(), p.ptr() + 4 * MIB as u64);
    drop(p);
    drop(q);
    let _r = a.alloc(8 * MIB).unwrap();
    assert_eq!(mallocs.load(Ordering::SeqCst), 3, "a new segment");
}

#[test]
fn while_recording_freed_blocks_keep_apart_and_untouched_requests_avoid_them() {
    let (a, mallocs, _) = fake();
    let base = a.alloc(8 * MIB).unwrap().ptr(); // cached before the recording
    a.keep_cached(true);
    let x = a.alloc(8 * MIB).unwrap();
    assert_eq!(x.ptr(), base, "activations reuse what was freed before");
    drop(x); // touched: a recorded kernel wrote it
             // An activation may split the touched block; its rest stays touched.
    let act = a.alloc(2 * MIB).unwrap();
    assert_eq!(act.ptr(), base);
    let t = a.alloc_untouched(2 * MIB).unwrap();
    assert!(
        t.ptr() >= base + 8 * MIB as u64,
        "not the touched block's rest: a new segment"
    );
    let segments = mallocs.load(Ordering::SeqCst);
    assert_eq!(segments, 2);
    // Freed while recording, the halves do not merge: 8 MiB is a new segment.
    drop(act);
    let big = a.alloc(8 * MIB).unwrap();
    assert_eq!(mallocs.load(Ordering::SeqCst), 3);
    drop(big);
    drop(t);
    a.keep_cached(false);
    // The recording over: the first segment merged whole again.
    assert_eq!(a.alloc(8 * MIB).unwrap().ptr(), base);
    assert_eq!(mallocs.load(Ordering::SeqCst), 3);
}

/// A serving load's steps: each allocates buffers proportional to its
/// rows (which vary step by step) and frees them.
fn steps(a: &Arc<Allocator>, n: usize) {
    let widths = [4096usize, 24_576, 8192, 2048 * 8 * 2, 12_288];
    for i in 0..n {
        // Rows from 1,000 to 9,000, a different count every step.
        let rows = 1000 + (i * 7919) % 8000;
        let bufs: Vec<DeviceBuffer> = widths.iter().map(|w| a.alloc(rows * w).unwrap()).collect();
        drop(bufs);
    }
}

#[test]
fn steps_of_varying_sizes_keep_the_cache_near_the_live_peak() {
    let (a, _, _) = fake();
    steps(&a, 300);
    let s = a.stats();
    // The largest step: 9,000 rows x 71,680 bytes of widths = 615 MiB.
    assert!(s.peak >= 600 << 20, "{s:?}");
    // Exact-size reuse kept ≈ 28x the peak here (a new size every step;
    // session 29's simulation); split and merged, ≈ 1.15x.
    assert!(
        s.reserved <= s.peak + (s.peak >> 2),
        "reserved {} MiB against a live peak of {} MiB",
        s.reserved >> 20,
        s.peak >> 20
    );
    assert_eq!(a.lock().large.free_bytes() as u64, s.reserved - s.active);
    assert_eq!(
        s.driver_allocs - s.driver_frees,
        a.lock().large.segment_count() as u64,
        "the counters: every segment held was allocated and not freed"
    );
}

#[test]
fn the_driver_calls_are_counted() {
    let (a, mallocs, frees) = fake();
    let small = a.alloc(1000).unwrap();
    let big = a.alloc(4 * MIB).unwrap();
    drop(big);
    let bigger = a.alloc(8 * MIB).unwrap(); // the 4 MiB segment goes back first
    let s = a.stats();
    assert_eq!(
        (s.driver_allocs, s.driver_frees),
        (mallocs.load(Ordering::SeqCst), frees.load(Ordering::SeqCst))
    );
    assert_eq!((s.driver_allocs, s.driver_frees), (3, 1));
    drop((small, bigger));
    a.empty_cache();
    assert_eq!(a.stats().driver_frees, 3);
    assert_eq!(a.stats().driver_frees, frees.load(Ordering::SeqCst));
}
