//! Exact transient-memory accounting: every workspace buffer an attention
//! call allocates goes through a [`Workspace`], which counts its bytes.
//!
//! Nothing is freed before the call returns, so the total is also the peak.
//! Per-worker scratch lives in a [`Pool`] created with one entry per worker
//! the call can run concurrently; a task takes an entry for its duration.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Counts the bytes of every buffer allocated through it.
#[derive(Debug, Default)]
pub(crate) struct Workspace {
    bytes: AtomicU64,
}

impl Workspace {
    /// A zeroed buffer of `n` elements, counted.
    pub(crate) fn alloc<E: Copy + Default>(&self, n: usize) -> Vec<E> {
        self.bytes
            .fetch_add((n * std::mem::size_of::<E>()) as u64, Ordering::Relaxed);
        vec![E::default(); n]
    }

    /// Total bytes allocated so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// Per-worker scratch entries. `with` lends one to a task; if every entry is
/// lent (more concurrent tasks than planned), a new one is made — through the
/// same counted [`Workspace`], so the report stays exact.
pub(crate) struct Pool<'w, S, F: Fn(&Workspace) -> S> {
    items: Mutex<Vec<S>>,
    make: F,
    ws: &'w Workspace,
}

impl<'w, S, F: Fn(&Workspace) -> S> Pool<'w, S, F> {
    /// A pool of `n` entries made now.
    pub(crate) fn new(ws: &'w Workspace, n: usize, make: F) -> Self {
        let items = (0..n).map(|_| make(ws)).collect();
        Pool {
            items: Mutex::new(items),
            make,
            ws,
        }
    }

    /// Runs `f` with an entry lent for its duration.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        let taken = self.items.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut item = taken.unwrap_or_else(|| (self.make)(self.ws));
        let r = f(&mut item);
        self.items
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(item);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_allocation_including_overflow_entries() {
        let ws = Workspace::default();
        let a: Vec<f32> = ws.alloc(10);
        let b: Vec<u8> = ws.alloc(3);
        assert_eq!((a.len(), b.len()), (10, 3));
        assert_eq!(ws.bytes(), 43);
        let pool = Pool::new(&ws, 1, |w| w.alloc::<f64>(2));
        assert_eq!(ws.bytes(), 59);
        // Nested use: the single entry is lent, so a second one is made and counted.
        pool.with(|_| pool.with(|inner| inner[0] = 1.0));
        assert_eq!(ws.bytes(), 75);
    }
}
