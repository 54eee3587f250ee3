//! CUDA events on a stream ([`StreamEvent`]): device time between two of
//! them (benches, the GPU tests' timings, the decode statistics) or the
//! point the host waits for (a step's drawn tokens). Recorded on anything
//! that binds a context and names a stream ([`EventStream`]: the device),
//! so the decode statistics, which record them at each step's first
//! launch, need not know the device that calls them.

use crate::CudaError;
use cudarc::driver::{result, sys};

/// A stream events are recorded on, in a context made current first.
pub trait EventStream {
    /// Makes the stream's context current on the calling thread.
    fn bind_context(&self) -> Result<(), CudaError>;
    /// The stream.
    fn raw_stream(&self) -> sys::CUstream;
}

/// A CUDA event recorded on a device's stream (destroyed on drop): device
/// time between two of them, for benches, the GPU tests' timings and the
/// decode statistics; or, untimed, the point the host waits for (a step's
/// drawn tokens, `ops::sample::Drawn`).
pub struct StreamEvent(sys::CUevent);

// SAFETY: an event handle of the device's context (contexts are not bound
// to a thread), used by its one owner.
unsafe impl Send for StreamEvent {}

impl StreamEvent {
    /// A new event recorded on `dev`'s stream now.
    pub fn record(dev: &impl EventStream) -> Result<Self, CudaError> {
        Self::record_with(dev, sys::CUevent_flags::CU_EVENT_DEFAULT)
    }

    /// [`Self::record`] without timing (cheaper to record and wait for; no
    /// [`Self::ms_since`]).
    pub fn marker(dev: &impl EventStream) -> Result<Self, CudaError> {
        Self::record_with(dev, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
    }

    fn record_with(dev: &impl EventStream, flags: sys::CUevent_flags) -> Result<Self, CudaError> {
        dev.bind_context()?;
        let e = StreamEvent(result::event::create(flags)?);
        // SAFETY: the event and the stream are live in the bound context.
        unsafe { result::event::record(e.0, dev.raw_stream())? };
        Ok(e)
    }

    /// Waits for the work queued before this event (not for later work).
    pub fn wait(&self) -> Result<(), CudaError> {
        // SAFETY: recorded in `record_with`.
        unsafe { result::event::synchronize(self.0)? };
        Ok(())
    }

    /// Milliseconds of device time from `start` to this event (waits for this one).
    pub fn ms_since(&self, start: &StreamEvent) -> Result<f64, CudaError> {
        // SAFETY: both events were recorded (on the same stream).
        unsafe {
            result::event::synchronize(self.0)?;
            Ok(result::event::elapsed(start.0, self.0)? as f64)
        }
    }
}

impl Drop for StreamEvent {
    fn drop(&mut self) {
        // SAFETY: created in `record`, destroyed once.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// A [`headroom_core::TimelineMark`] of this point of `dev`'s stream: an
/// event recorded there (`Backend::timeline_mark`).
pub fn timeline_mark(dev: &impl EventStream) -> Result<headroom_core::TimelineMark, CudaError> {
    Ok(headroom_core::TimelineMark::Device(Box::new(
        StreamEvent::record(dev)?,
    )))
}

/// Seconds of device time from `from` to `to`, two marks of
/// [`timeline_mark`] (waits for `to`); a mark of another kind is an error.
pub fn timeline_seconds(
    from: &headroom_core::TimelineMark,
    to: &headroom_core::TimelineMark,
) -> headroom_core::OpResult<f64> {
    fn event(m: &headroom_core::TimelineMark) -> Option<&StreamEvent> {
        match m {
            headroom_core::TimelineMark::Device(e) => e.downcast_ref::<StreamEvent>(),
            headroom_core::TimelineMark::Host(_) => None,
        }
    }
    let (Some(a), Some(b)) = (event(from), event(to)) else {
        return Err(headroom_core::ops::foreign_mark());
    };
    b.ms_since(a)
        .map(|ms| ms * 1e-3)
        .map_err(crate::error::dev_err)
}
