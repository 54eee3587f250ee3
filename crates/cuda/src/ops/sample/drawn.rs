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
use crate::event::StreamEvent;
use crate::launch::dev_err;
use headroom_core::ops::OpResult;
use std::time::Instant;

/// One step's drawn tokens: on the device, and (after `done`) in `host`.
pub struct Drawn {
    /// u32 per row (none for zero rows).
    tokens: Option<DeviceBuffer>,
    rows: usize,
    host: Option<Pinned>,
    done: Option<StreamEvent>,
}

impl Drawn {
    /// Queues the read-back of `rows` tokens in `tokens` and its event.
    pub(crate) fn queue(dev: &CudaDevice, tokens: DeviceBuffer, rows: usize) -> OpResult<Drawn> {
        let bytes = 4 * rows;
        let host = dev.pinned(bytes).map_err(dev_err)?;
        dev.copy_to_pinned(&tokens, &host, bytes).map_err(dev_err)?;
        crate::decode_stats::before_readback(dev.options().decode_stats, dev);
        let done = StreamEvent::marker(dev).map_err(dev_err)?;
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
        done.wait().map_err(dev_err)?;
        let mut tokens = vec![0u32; self.rows];
        // SAFETY: the copy of `rows` u32 into `host` completed (its event).
        unsafe {
            std::ptr::copy_nonoverlapping(host.ptr() as *const u32, tokens.as_mut_ptr(), self.rows)
        };
        super::tokens_read(dev, queued, tokens)
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
