//! Tokens drawn on the device and read later ([`Drawn`], the CUDA
//! backend's `Backend::Drawn`): `sample_later` queues the draw, a copy of
//! the tokens into a page-locked host buffer and an event behind them, and
//! returns; the engine queues the next step (whose embedding reads the
//! tokens from the device, `ops::pointwise::embed_drawn`) and only then
//! waits for this event — not for the stream, which by then holds the
//! next step.

use crate::alloc::DeviceBuffer;
use crate::device::pinned::Pinned;
use crate::device::CudaDevice;
use crate::launch::dev_err;
use cudarc::driver::{result, sys};
use headroom_core::ops::{OpError, OpResult};
use std::time::Instant;

/// An event recorded on the device's stream (no timing), destroyed on drop.
struct Done(sys::CUevent);

// SAFETY: an event handle of the device's context, used by one owner.
unsafe impl Send for Done {}

impl Done {
    fn record(dev: &CudaDevice) -> OpResult<Done> {
        dev.bind().map_err(dev_err)?;
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(|e| OpError::Device(e.to_string()))?;
        let done = Done(e);
        // SAFETY: the event and the stream are live in the bound context.
        unsafe { result::event::record(done.0, dev.stream_raw()) }
            .map_err(|e| OpError::Device(e.to_string()))?;
        Ok(done)
    }

    fn wait(&self) -> OpResult<()> {
        // SAFETY: recorded in `record`.
        unsafe { result::event::synchronize(self.0) }.map_err(|e| OpError::Device(e.to_string()))
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        // SAFETY: created in `record`, destroyed once.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// One step's drawn tokens: on the device, and (after `done`) in `host`.
pub struct Drawn {
    /// u32 per row (none for zero rows).
    tokens: Option<DeviceBuffer>,
    rows: usize,
    host: Option<Pinned>,
    done: Option<Done>,
}

impl Drawn {
    /// Queues the read-back of `rows` tokens in `tokens` and its event.
    pub(crate) fn queue(dev: &CudaDevice, tokens: DeviceBuffer, rows: usize) -> OpResult<Drawn> {
        let bytes = 4 * rows;
        let host = dev.pinned(bytes).map_err(dev_err)?;
        dev.copy_to_pinned(&tokens, &host, bytes).map_err(dev_err)?;
        crate::decode_stats::before_readback(dev.options().decode_stats, dev);
        let done = Done::record(dev)?;
        Ok(Drawn {
            tokens: Some(tokens),
            rows,
            host: Some(host),
            done: Some(done),
        })
    }

    /// No rows.
    pub(crate) fn empty() -> Drawn {
        Drawn {
            tokens: None,
            rows: 0,
            host: None,
            done: None,
        }
    }

    /// Rows drawn.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The tokens on the device (u32 per row; `None` for zero rows).
    pub(crate) fn device(&self) -> Option<&DeviceBuffer> {
        self.tokens.as_ref()
    }

    /// Waits for the tokens (this step's event only) and reads them; a row
    /// without a finite logit is an error, as in `sample`.
    pub(crate) fn read(&self, dev: &CudaDevice) -> OpResult<Vec<u32>> {
        let (Some(host), Some(done)) = (&self.host, &self.done) else {
            return Ok(Vec::new());
        };
        let queued = Instant::now();
        done.wait()?;
        let mut tokens = vec![0u32; self.rows];
        // SAFETY: the copy of `rows` u32 into `host` completed (its event).
        unsafe {
            std::ptr::copy_nonoverlapping(host.ptr() as *const u32, tokens.as_mut_ptr(), self.rows)
        };
        crate::decode_stats::step_done(dev.options().decode_stats, queued, self.rows);
        crate::profile_window::step_done(dev.options().profile_step);
        super::check_finite(&tokens)?;
        Ok(tokens)
    }
}

impl Drop for Drawn {
    /// A draw dropped unread (its requests aborted) waits for its copy
    /// first: the page-locked buffer goes back to the pool, where the next
    /// draw (or the pool's drop) may take it.
    fn drop(&mut self) {
        if let Some(done) = &self.done {
            let _ = done.wait();
        }
    }
}
