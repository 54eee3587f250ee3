//! Small read-only device tables (positions, slots, row indices, the
//! batch's sequence table), kept with the key they were built from: a
//! request with an equal key gets the same buffer back with nothing built or
//! copied, so every op of a step shares one copy of the step's tables. A new
//! key takes the least recently used entry and rewrites its persistent
//! buffer in place, ordered on the stream after every kernel queued before
//! (those read the old contents). A buffer a caller still holds is never
//! rewritten, and one too small is replaced by one of the next power of two
//! (the buffers grow to the largest batch seen).

use crate::alloc::DeviceBuffer;
use crate::CudaError;
use headroom_core::ops::Batch;
use std::sync::{Arc, Mutex};

/// Where a cache's buffers come from and how they are filled: the device's
/// allocator and stream (`CudaDevice`), a fake in tests.
pub(crate) trait TableSink {
    /// A buffer of at least `bytes` bytes.
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError>;
    /// Copies `data` to the start of `buf`, ordered after the work queued
    /// so far (while a step is recorded: held until its capture ends,
    /// `super::capture`, keeping `buf`).
    fn write(&self, buf: &Arc<DeviceBuffer>, data: &[u8]) -> Result<(), CudaError>;
    /// `buf` was handed out again unchanged: while a step is recorded it
    /// is kept until the capture ends, so no later table of the step is
    /// written over what the step's earlier kernels read from it (their
    /// copies all land before the graph runs).
    fn used(&self, _buf: &Arc<DeviceBuffer>) {}
}

/// Smallest buffer a table gets (bytes).
const MIN_BYTES: usize = 256;

struct Entry<K> {
    key: K,
    buf: Arc<DeviceBuffer>,
}

/// Up to `kept` tables keyed by `K`, most recently used first.
pub(crate) struct TableCache<K> {
    entries: Mutex<Vec<Entry<K>>>,
    kept: usize,
}

impl<K> TableCache<K> {
    pub(crate) fn new(kept: usize) -> TableCache<K> {
        TableCache {
            entries: Mutex::new(Vec::with_capacity(kept)),
            kept: kept.max(1),
        }
    }

    /// The buffer of the entry whose key `hit`s; else `build` gives the key
    /// and the bytes, which are copied into a kept buffer (see the module
    /// comment). `err` turns a device error into the caller's.
    pub(crate) fn get<E>(
        &self,
        sink: &dyn TableSink,
        hit: impl Fn(&K) -> bool,
        build: impl FnOnce() -> Result<(K, Vec<u8>), E>,
        err: impl Fn(CudaError) -> E,
    ) -> Result<Arc<DeviceBuffer>, E> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = entries.iter().position(|e| hit(&e.key)) {
            let e = entries.remove(i);
            let buf = Arc::clone(&e.buf);
            entries.insert(0, e);
            sink.used(&buf);
            return Ok(buf);
        }
        let (key, data) = build()?;
        let evicted = if entries.len() >= self.kept {
            entries.pop()
        } else {
            None
        };
        let reusable = evicted
            .map(|e| e.buf)
            .filter(|b| Arc::strong_count(b) == 1 && b.len_bytes() >= data.len());
        let buf = match reusable {
            Some(b) => b,
            None => {
                let bytes = data.len().max(MIN_BYTES).next_power_of_two();
                Arc::new(sink.alloc(bytes).map_err(&err)?)
            }
        };
        if !data.is_empty() {
            sink.write(&buf, &data).map_err(&err)?;
        }
        entries.insert(
            0,
            Entry {
                key,
                buf: Arc::clone(&buf),
            },
        );
        Ok(buf)
    }
}

/// What a batch's sequence table is built from: its row offsets, slots and
/// histories (the table's key).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BatchKey {
    cu_seqlens: Vec<usize>,
    slots: Vec<usize>,
    history: Vec<usize>,
}

impl BatchKey {
    pub(crate) fn of(batch: &Batch) -> BatchKey {
        BatchKey {
            cu_seqlens: batch.cu_seqlens.clone(),
            slots: batch.slots.clone(),
            history: batch.history.clone(),
        }
    }

    /// Whether `batch` has exactly this key's fields.
    pub(crate) fn matches(&self, batch: &Batch) -> bool {
        self.cu_seqlens == batch.cu_seqlens
            && self.slots == batch.slots
            && self.history == batch.history
    }
}

/// The bytes of a table of plain integers or floats.
pub(crate) fn bytes_of<T: Copy>(data: &[T]) -> &[u8] {
    // SAFETY: `data` is `size_of_val(data)` initialised bytes of `Copy`
    // values; the tables are integers and floats (no padding).
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{fake_allocator, Allocator};
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// A sink that keeps each address's contents and counts the copies.
    struct Fake {
        alloc: Arc<Allocator>,
        memory: Mutex<HashMap<u64, Vec<u8>>>,
        writes: AtomicU64,
    }
    impl Fake {
        fn new() -> Fake {
            Fake {
                alloc: fake_allocator(),
                memory: Mutex::new(HashMap::new()),
                writes: AtomicU64::new(0),
            }
        }
        fn at(&self, buf: &DeviceBuffer, len: usize) -> Vec<u8> {
            self.at_ptr(buf.ptr(), len)
        }
        fn at_ptr(&self, ptr: u64, len: usize) -> Vec<u8> {
            self.memory.lock().unwrap()[&ptr][..len].to_vec()
        }
        fn writes(&self) -> u64 {
            self.writes.load(Ordering::SeqCst)
        }
    }
    impl TableSink for Fake {
        fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
            self.alloc.alloc(bytes)
        }
        fn write(&self, buf: &Arc<DeviceBuffer>, data: &[u8]) -> Result<(), CudaError> {
            assert!(data.len() <= buf.len_bytes(), "write past the buffer");
            self.writes.fetch_add(1, Ordering::SeqCst);
            let mut m = self.memory.lock().unwrap();
            let cell = m.entry(buf.ptr()).or_default();
            cell.resize(cell.len().max(data.len()), 0);
            cell[..data.len()].copy_from_slice(data);
            Ok(())
        }
    }

    fn get(c: &TableCache<Vec<u8>>, sink: &dyn TableSink, data: &[u8]) -> Arc<DeviceBuffer> {
        c.get(
            sink,
            |k| k.as_slice() == data,
            || Ok::<_, CudaError>((data.to_vec(), data.to_vec())),
            |e| e,
        )
        .unwrap()
    }

    #[test]
    fn equal_keys_share_one_buffer_and_one_copy() {
        let (c, sink) = (TableCache::new(4), Fake::new());
        let a = get(&c, &sink, &[1, 2, 3]);
        let b = get(&c, &sink, &[1, 2, 3]);
        assert_eq!(a.ptr(), b.ptr());
        assert_eq!(sink.writes(), 1, "the second request copies nothing");
        let d = get(&c, &sink, &[1, 2, 4]);
        assert_ne!(d.ptr(), a.ptr(), "a held buffer is not rewritten");
        assert_eq!(sink.at(&a, 3), [1, 2, 3]);
        assert_eq!(sink.at(&d, 3), [1, 2, 4]);
        assert_eq!(get(&c, &sink, &[1, 2, 3]).ptr(), a.ptr(), "still kept");
    }

    #[test]
    fn a_new_key_rewrites_the_oldest_unheld_buffer_in_place() {
        let (c, sink) = (TableCache::new(1), Fake::new());
        let first = get(&c, &sink, &[7; 10]).ptr();
        let second = get(&c, &sink, &[8; 10]);
        assert_eq!(second.ptr(), first, "the persistent buffer is reused");
        assert_eq!(sink.at(&second, 10), [8; 10]);
        // Held: the next key goes elsewhere and the holder's contents stay.
        let third = get(&c, &sink, &[9; 10]);
        assert_ne!(third.ptr(), second.ptr());
        assert_eq!(sink.at(&second, 10), [8; 10]);
        assert_eq!(sink.at(&third, 10), [9; 10]);
    }

    /// A sink that holds every buffer it writes, as a step being recorded
    /// does until its capture ends (`super::super::capture`).
    struct Holding {
        fake: Fake,
        held: Mutex<Vec<Arc<DeviceBuffer>>>,
    }
    impl Holding {
        fn new() -> Holding {
            Holding {
                fake: Fake::new(),
                held: Mutex::new(Vec::new()),
            }
        }
    }
    impl TableSink for Holding {
        fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
            self.fake.alloc(bytes)
        }
        fn write(&self, buf: &Arc<DeviceBuffer>, data: &[u8]) -> Result<(), CudaError> {
            self.held.lock().unwrap().push(Arc::clone(buf));
            self.fake.write(buf, data)
        }
        fn used(&self, buf: &Arc<DeviceBuffer>) {
            self.held.lock().unwrap().push(Arc::clone(buf));
        }
    }

    #[test]
    fn a_table_written_while_recording_is_not_rewritten_before_the_capture_ends() {
        let c = TableCache::<Vec<u8>>::new(1);
        let sink = Holding::new();
        let get = |data: &[u8]| get(&c, &sink, data).ptr();
        let first = get(&[1; 16]);
        let second = get(&[2; 16]);
        assert_ne!(second, first, "the first table's copy is still held");
        sink.held.lock().unwrap().clear(); // the capture ended: copies queued
        let third = get(&[3; 16]);
        assert_eq!(third, second, "rewritten in place once nothing holds it");
    }

    #[test]
    fn a_table_read_again_while_recording_is_not_rewritten_before_the_capture_ends() {
        let c = TableCache::<Vec<u8>>::new(1);
        let sink = Holding::new();
        let get = |data: &[u8]| get(&c, &sink, data).ptr();
        let old = get(&[1; 16]);
        // An earlier step's capture ended; this step's kernels read the
        // table unchanged (a hit), then the step needs another: the first
        // one's buffer must keep its bytes.
        sink.held.lock().unwrap().clear();
        assert_eq!(get(&[1; 16]), old);
        let other = get(&[2; 16]);
        assert_ne!(other, old, "the hit table is held: not rewritten in place");
        assert_eq!(sink.fake.at_ptr(old, 16), [1; 16]);
    }

    #[test]
    fn a_larger_table_grows_the_buffer() {
        let (c, sink) = (TableCache::new(1), Fake::new());
        let small = get(&c, &sink, &[1; 8]);
        assert_eq!(small.len_bytes(), MIN_BYTES);
        drop(small);
        let big = get(&c, &sink, &[2; 1000]);
        assert_eq!(big.len_bytes(), 1024);
        assert_eq!(sink.at(&big, 1000), vec![2; 1000]);
    }

    #[test]
    fn batch_keys_match_only_their_own_batch() {
        let a = Batch::packed(&[(0, 5, 1), (3, 9, 1)]);
        let key = BatchKey::of(&a);
        assert!(key.matches(&a.clone()));
        assert!(
            !key.matches(&Batch::packed(&[(0, 5, 1), (3, 10, 1)])),
            "history"
        );
        assert!(
            !key.matches(&Batch::packed(&[(0, 5, 1), (2, 9, 1)])),
            "slot"
        );
        assert!(
            !key.matches(&Batch::packed(&[(0, 5, 2), (3, 9, 1)])),
            "rows"
        );
        assert!(!key.matches(&Batch::packed(&[(0, 5, 1)])), "sequences");
    }

    #[test]
    fn build_errors_reach_the_caller_and_cache_nothing() {
        let (c, sink) = (TableCache::<Vec<u8>>::new(2), Fake::new());
        let r = c.get(
            &sink,
            |_| true,
            || Err::<(Vec<u8>, Vec<u8>), _>("bad"),
            |_| "dev",
        );
        assert_eq!(r.unwrap_err(), "bad");
        assert_eq!(sink.writes(), 0);
    }
}
