//! Page-locked host buffers for the sampled tokens of a step whose next
//! step is queued before they are read (`crate::ops::sample::Drawn`): the
//! device copies the tokens into one on the stream (`cuMemcpyDtoHAsync`
//! needs page-locked memory to stay asynchronous), and the host reads them
//! after the copy's event. A few buffers are kept and reused (a step in
//! flight and the one being read hold one each); `cuMemAllocHost` is far
//! too slow for every step.

use cudarc::driver::{result, DriverError};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Buffers kept for reuse.
const KEPT: usize = 4;
/// The smallest buffer made (bytes).
const MIN_BYTES: usize = 4096;

/// One page-locked allocation.
struct Block {
    ptr: *mut c_void,
    bytes: usize,
}

// SAFETY: plain host memory; one owner at a time (a `Pinned` or the pool).
unsafe impl Send for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host`, freed once; no copy into it is
        // in flight (its owner waited for its copy's event before giving it
        // back: `ops::sample::Drawn`).
        let _ = unsafe { result::free_host(self.ptr) };
    }
}

/// The device's page-locked buffers not in use.
#[derive(Default)]
pub struct PinnedPool {
    free: Mutex<Vec<Block>>,
}

impl PinnedPool {
    /// A buffer of at least `bytes`: a kept one that is large enough, else a
    /// new one (the device's context must be current).
    pub fn take(self: &Arc<Self>, bytes: usize) -> Result<Pinned, DriverError> {
        let kept = {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            free.iter()
                .position(|b| b.bytes >= bytes)
                .map(|i| free.swap_remove(i))
        };
        let block = match kept {
            Some(b) => b,
            None => {
                let want = bytes.max(MIN_BYTES).next_power_of_two();
                // SAFETY: a fresh page-locked allocation of `want` bytes.
                let ptr = unsafe { result::malloc_host(want, 0)? };
                Block { ptr, bytes: want }
            }
        };
        Ok(Pinned {
            block: Some(block),
            pool: Arc::clone(self),
        })
    }

    fn give(&self, block: Block) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < KEPT {
            free.push(block);
        }
    }
}

/// A page-locked buffer taken from a [`PinnedPool`], returned on drop.
pub struct Pinned {
    block: Option<Block>,
    pool: Arc<PinnedPool>,
}

impl Pinned {
    pub fn ptr(&self) -> *mut c_void {
        self.block.as_ref().map_or(std::ptr::null_mut(), |b| b.ptr)
    }

    pub fn len_bytes(&self) -> usize {
        self.block.as_ref().map_or(0, |b| b.bytes)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            self.pool.give(b);
        }
    }
}
