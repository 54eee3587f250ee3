//! The device's side of a step being recorded as a CUDA graph
//! (`crate::graph`). While the stream captures, nothing runs: kernels and
//! cuBLAS calls become the graph's nodes. A table the ops copy to the
//! device (`CudaDevice::upload_table`, the sequence tables) cannot be a
//! node (its host bytes are gone by the time the graph runs), so its copy
//! is held here and queued on the stream after the capture ends, ahead of
//! the graph's launch: the graph's kernels read it as they would have read
//! the copy queued among them. A held copy keeps its buffer, so no later
//! table of the same step is written into it (the table cache rewrites
//! only buffers nobody else holds), and no allocation of the step gets it.
//! The calls that wait for the device (`read`, `write`, `synchronize`)
//! are refused while capturing: they would end the capture; outside a
//! capture they are counted, so a step queued as it is shows whether it
//! waited (`crate::graph` records a key only after a first step that did
//! not). A capture's
//! signature hashes what decides its nodes' kernels — each launch's
//! function and each library call's shape class, in order — so graphs of
//! other kernels are not updated into each other (`crate::graph`).

use crate::alloc::DeviceBuffer;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A capture's signature before anything is mixed in.
pub(crate) const SIGNATURE_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// `h` with the word `w` mixed in (a signature's step; order counts).
pub(crate) fn mix_word(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29)
}

/// One table copy held back until the capture ends.
pub(crate) struct Held {
    pub buf: Arc<DeviceBuffer>,
    pub bytes: Vec<u8>,
}

/// Whether the stream is capturing, and the copies held meanwhile.
#[derive(Default)]
pub(crate) struct Capture {
    active: AtomicBool,
    held: Mutex<Vec<Held>>,
    signature: AtomicU64,
    /// Library calls (cuBLAS) of the capture under way or last ended.
    library_calls: AtomicU64,
    waits: AtomicU64,
}

impl Capture {
    /// Whether a capture is under way.
    pub(crate) fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Counts one call that waits for the device.
    pub(crate) fn count_wait(&self) {
        self.waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls that waited for the device (or were refused) so far.
    pub(crate) fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Marks a capture as started (its signature empty).
    pub(crate) fn start(&self) {
        self.signature.store(SIGNATURE_SEED, Ordering::Relaxed);
        self.library_calls.store(0, Ordering::Relaxed);
        self.active.store(true, Ordering::Release);
    }

    /// Adds `words` (a launch's function, a library call's shape class) to
    /// the capture's signature; nothing outside a capture.
    pub(crate) fn mix(&self, words: &[u64]) {
        if !self.active() {
            return;
        }
        let mut h = self.signature.load(Ordering::Relaxed);
        for &w in words {
            h = mix_word(h, w);
        }
        self.signature.store(h, Ordering::Relaxed);
    }

    /// Mixes a library call's shape class (`words`) into the signature
    /// and counts the call; nothing outside a capture. The library picks
    /// its kernels itself (`crate::graph` reads them from the graph when a
    /// capture has any such call).
    pub(crate) fn library_call(&self, words: &[u64]) {
        if !self.active() {
            return;
        }
        self.mix(words);
        self.library_calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Library calls of the capture under way or last ended.
    pub(crate) fn library_calls(&self) -> u64 {
        self.library_calls.load(Ordering::Relaxed)
    }

    /// The signature of the capture under way or last ended.
    pub(crate) fn signature(&self) -> u64 {
        self.signature.load(Ordering::Relaxed)
    }

    /// Holds a copy of `data` into the start of `buf` until [`Self::finish`]
    /// (no bytes: `buf` is only kept, read by the step as it is).
    pub(crate) fn hold(&self, buf: &Arc<DeviceBuffer>, data: &[u8]) {
        self.lock().push(Held {
            buf: Arc::clone(buf),
            bytes: data.to_vec(),
        });
    }

    /// Marks the capture as ended and gives the held copies, in the order
    /// they were made (a later copy into the same buffer lands last).
    pub(crate) fn finish(&self) -> Vec<Held> {
        self.active.store(false, Ordering::Release);
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::fake_allocator;

    #[test]
    fn held_copies_keep_their_buffers_and_come_back_in_order_once() {
        let alloc = fake_allocator();
        let c = Capture::default();
        assert!(!c.active());
        c.start();
        assert!(c.active());
        let a = Arc::new(alloc.alloc(64).unwrap());
        let b = Arc::new(alloc.alloc(64).unwrap());
        c.hold(&a, &[1, 2]);
        c.hold(&b, &[3]);
        c.hold(&a, &[4]);
        assert_eq!(Arc::strong_count(&a), 3, "held twice besides the caller");
        let held = c.finish();
        assert!(!c.active());
        let got: Vec<(u64, Vec<u8>)> = held
            .iter()
            .map(|h| (h.buf.ptr(), h.bytes.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (a.ptr(), vec![1, 2]),
                (b.ptr(), vec![3]),
                (a.ptr(), vec![4])
            ]
        );
        drop(held);
        assert_eq!(Arc::strong_count(&a), 1, "released with the copies");
        assert!(c.finish().is_empty(), "given once");
    }

    #[test]
    fn library_calls_are_counted_per_capture_and_only_while_capturing() {
        let c = Capture::default();
        c.library_call(&[1]);
        c.start();
        c.library_call(&[1]);
        c.mix(&[2]);
        c.library_call(&[3]);
        let signed = c.signature();
        let _ = c.finish();
        c.library_call(&[4]);
        assert_eq!(c.library_calls(), 2, "kept after the capture ends");
        assert_eq!(c.signature(), signed, "nothing mixed after it");
        c.start();
        assert_eq!(c.library_calls(), 0, "a new capture starts at none");
        let sig = |f: &dyn Fn(&Capture)| {
            let c = Capture::default();
            c.start();
            f(&c);
            c.signature()
        };
        assert_eq!(
            sig(&|c| c.library_call(&[5, 6])),
            sig(&|c| c.mix(&[5, 6])),
            "a library call's class is in the signature"
        );
    }

    #[test]
    fn the_signature_follows_what_is_mixed_in_order_and_only_while_capturing() {
        let sig = |calls: &[&[u64]]| {
            let c = Capture::default();
            c.mix(&[99]); // before the capture: ignored
            c.start();
            for w in calls {
                c.mix(w);
            }
            let _ = c.finish();
            c.mix(&[7]); // after: ignored
            c.signature()
        };
        assert_eq!(sig(&[&[1], &[2, 3]]), sig(&[&[1], &[2, 3]]));
        assert_ne!(sig(&[&[1], &[2, 3]]), sig(&[&[2, 3], &[1]]), "order counts");
        assert_ne!(sig(&[&[1]]), sig(&[&[1], &[1]]), "count counts");
        assert_ne!(sig(&[]), sig(&[&[0]]));
    }
}
