//! Kernel launches of the ops: argument packing, grid sizes, the small host
//! tables the kernels read (the batch's sequence table built once per
//! batch), and the conversion of device errors to [`OpError`].

use crate::alloc::DeviceBuffer;
use crate::decode_stats::{counted, OP_LAUNCHES, OP_LAUNCH_NS};
use crate::device::CudaDevice;
use crate::CudaError;
use headroom_core::ops::{OpError, OpResult};
use std::ffi::c_void;
use std::sync::Arc;

/// Most arguments of one kernel.
const MAX_ARGS: usize = 24;

/// Kernel arguments, each in its own 8-byte slot (a 4-byte argument is read
/// from the slot's low bytes: little-endian), on the stack: a launch makes no
/// heap allocation. More than [`MAX_ARGS`] makes the launch an error.
pub(crate) struct Args {
    slots: [u64; MAX_ARGS],
    len: usize,
}

impl Default for Args {
    fn default() -> Self {
        Args::new()
    }
}

impl Args {
    pub fn new() -> Args {
        Args {
            slots: [0; MAX_ARGS],
            len: 0,
        }
    }
    pub fn ptr(mut self, p: u64) -> Args {
        if let Some(s) = self.slots.get_mut(self.len) {
            *s = p;
        }
        self.len += 1;
        self
    }
    pub fn u64(self, v: u64) -> Args {
        self.ptr(v)
    }
    pub fn i64(self, v: i64) -> Args {
        self.ptr(v as u64)
    }
    pub fn i32(self, v: i32) -> Args {
        self.ptr(v as u32 as u64)
    }
    pub fn f32(self, v: f32) -> Args {
        self.ptr(v.to_bits() as u64)
    }
}

pub(crate) use crate::error::dev_err;

/// A size that must fit the kernels' `int` parameters.
pub(crate) fn int(op: &'static str, what: &str, v: usize) -> OpResult<i32> {
    i32::try_from(v).map_err(|_| OpError::shape(op, format!("{what} {v} exceeds i32")))
}

/// `a · b` or a shape error.
pub(crate) fn mul(op: &'static str, a: usize, b: usize) -> OpResult<usize> {
    a.checked_mul(b)
        .ok_or_else(|| OpError::shape(op, format!("{a} × {b} overflows")))
}

/// Launches `entry` on the device stream.
///
/// # Safety
/// `args` must match the kernel's parameters, and every pointer among them must
/// address device memory large enough for what the kernel touches with this grid.
pub(crate) unsafe fn launch(
    dev: &CudaDevice,
    entry: &'static str,
    grid: (u32, u32, u32),
    block: u32,
    args: Args,
) -> OpResult<()> {
    launch_with(dev, entry, args, |f, params| {
        dev.launch(f, grid, (block, 1, 1), 0, params)
    })
}

/// [`launch_programmatic`] for a kernel whose parameters the caller packed
/// itself (`params` point at its arguments: a table passed by value, say).
///
/// # Safety
/// As [`launch_programmatic`], with `params` for `args`.
pub(crate) unsafe fn launch_packed_pdl(
    dev: &CudaDevice,
    entry: &'static str,
    grid: (u32, u32, u32),
    block: u32,
    params: &mut [*mut c_void],
) -> OpResult<()> {
    launch_params(dev, entry, params, |f, params| {
        dev.launch_programmatic(f, grid, (block, 1, 1), 0, params)
    })
}

/// [`launch`] with programmatic dependent launch on compute capability 9.0+
/// ([`CudaDevice::launch_programmatic`]): the kernel may start while the
/// previous kernel on the stream finishes.
///
/// # Safety
/// As [`launch`]; besides, the kernel must execute `griddepcontrol.wait`
/// before it reads anything an earlier kernel wrote and before it writes.
pub(crate) unsafe fn launch_programmatic(
    dev: &CudaDevice,
    entry: &'static str,
    grid: (u32, u32, u32),
    block: u32,
    args: Args,
) -> OpResult<()> {
    launch_with(dev, entry, args, |f, params| {
        dev.launch_programmatic(f, grid, (block, 1, 1), 0, params)
    })
}

/// Checks and packs `args`, then [`launch_params`].
fn launch_with(
    dev: &CudaDevice,
    entry: &'static str,
    mut args: Args,
    go: impl FnOnce(crate::device::Function, &mut [*mut c_void]) -> Result<(), CudaError>,
) -> OpResult<()> {
    if args.len > MAX_ARGS {
        return Err(OpError::Device(format!(
            "{entry}: {} arguments (at most {MAX_ARGS})",
            args.len
        )));
    }
    let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
    for (p, s) in params.iter_mut().zip(args.slots.iter_mut()) {
        *p = s as *mut u64 as *mut c_void;
    }
    launch_params(dev, entry, &mut params[..args.len], go)
}

/// Looks `entry` up and hands the function and the parameter pointers to
/// `go` (the driver call, which binds the context: [`CudaDevice::bind`]).
/// With the decode statistics on, the launch is counted and its whole path
/// timed here (the driver call alone in `CudaDevice::launch`).
fn launch_params(
    dev: &CudaDevice,
    entry: &'static str,
    params: &mut [*mut c_void],
    go: impl FnOnce(crate::device::Function, &mut [*mut c_void]) -> Result<(), CudaError>,
) -> OpResult<()> {
    let stats = dev.options().decode_stats;
    counted(stats, &OP_LAUNCHES, &OP_LAUNCH_NS, || {
        let f = dev.function(entry).map_err(dev_err)?;
        go(f, params).map_err(dev_err)
    })
}

/// One launch of a kernel that touches no memory (`init_normal_bf16` over
/// no elements): the host path's cost alone (`CudaDevice::launch_empty`).
pub(crate) fn empty(dev: &CudaDevice) -> OpResult<()> {
    let args = Args::new()
        .ptr(0)
        .u64(0)
        .u64(0)
        .f32(0.0)
        .f32(0.0)
        .u64(0)
        .u64(0)
        .u64(0)
        .u64(0);
    // SAFETY: with n = 0 the kernel's grid-stride loop reads and writes nothing.
    unsafe { launch(dev, "init_normal_bf16", (1, 1, 1), 32, args) }
}

/// Grid of a grid-stride element-wise kernel over `n` elements.
pub(crate) fn stride_grid(n: usize, block: u32) -> (u32, u32, u32) {
    let blocks = n.div_ceil(block as usize).clamp(1, 132 * 32);
    (blocks as u32, 1, 1)
}

/// A grid dimension of `n` (at least 1), or a shape error past the driver's limit.
pub(crate) fn grid_dim(op: &'static str, n: usize, limit: usize) -> OpResult<u32> {
    if n > limit {
        return Err(OpError::shape(
            op,
            format!("{n} blocks exceed the grid limit {limit}"),
        ));
    }
    Ok(n.max(1) as u32)
}

/// Largest `gridDim.x`.
pub(crate) const GRID_X: usize = (1 << 31) - 1;
/// Largest `gridDim.y` / `gridDim.z`.
pub(crate) const GRID_YZ: usize = 65_535;

/// A fresh device buffer of `bytes` bytes.
pub(crate) fn alloc(dev: &CudaDevice, bytes: usize) -> OpResult<DeviceBuffer> {
    dev.alloc(bytes).map_err(dev_err)
}

/// Uploads a small host table that kernels only read (positions, slots, row
/// indices), ordered on the stream without a host synchronisation, or the
/// copy an earlier call made of the same bytes (`CudaDevice::upload_table`).
pub(crate) fn upload<T: Copy>(dev: &CudaDevice, data: &[T]) -> OpResult<Arc<DeviceBuffer>> {
    dev.upload_table(data).map_err(dev_err)
}

/// The batch's sequence table for the varlen kernels, as i32:
/// `[cu_seqlens (n + 1)][slots (n)][history (n)]` (`3n + 1` values: far
/// fewer than per-row tables). Kernels find a row's sequence by binary
/// search over the first `n + 1`. Built and copied to the device once per
/// distinct batch: every op of a step gets the same buffer
/// (`CudaDevice::seq_table_with`).
pub(crate) fn seq_table(
    dev: &CudaDevice,
    op: &'static str,
    batch: &headroom_core::ops::Batch,
) -> OpResult<Arc<DeviceBuffer>> {
    dev.seq_table_with(batch, || seq_table_values(op, batch), dev_err)
}

/// The values of [`seq_table`], or a shape error when the batch is
/// inconsistent or a value exceeds i32.
pub(crate) fn seq_table_values(
    op: &'static str,
    batch: &headroom_core::ops::Batch,
) -> OpResult<Vec<i32>> {
    let n = batch.sequences();
    let (Some(cu), Some(history)) = (batch.cu_seqlens.get(..=n), batch.history.get(..n)) else {
        return Err(OpError::shape(
            op,
            format!(
                "{n} sequences, {} row offsets, {} histories",
                batch.cu_seqlens.len(),
                batch.history.len()
            ),
        ));
    };
    let mut table = Vec::with_capacity(3 * n + 1);
    for &r in cu {
        table.push(int(op, "row", r)?);
    }
    for &s in &batch.slots {
        table.push(int(op, "slot", s)?);
    }
    for (i, &h) in history.iter().enumerate() {
        // Every position of the sequence's rows must fit i32, not only the first.
        let last = h.saturating_add(cu[i + 1].saturating_sub(cu[i]));
        int(op, "position", last)?;
        table.push(int(op, "position", h)?);
    }
    Ok(table)
}

/// What the tests and the host-path bench reach of this module from outside
/// the crate, as methods of the device.
impl CudaDevice {
    /// `batch`'s sequence table as the varlen ops read it (i32
    /// `[cu_seqlens][slots][history]`, shared by every op of a step).
    pub fn sequence_table(
        &self,
        batch: &headroom_core::ops::Batch,
    ) -> Result<Arc<DeviceBuffer>, CudaError> {
        seq_table(self, "sequence_table", batch)
            .map_err(|e| CudaError::InvalidLaunch(e.to_string()))
    }

    /// Queues `count` launches of a kernel that touches no memory
    /// (`init_normal_bf16` over 0 elements) through the ops' launch path:
    /// the host cost of one launch, for the host-path bench.
    pub fn launch_empty(&self, count: usize) -> Result<(), CudaError> {
        for _ in 0..count {
            empty(self).map_err(|e| CudaError::InvalidLaunch(e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::ops::Batch;

    #[test]
    fn the_sequence_table_is_offsets_then_slots_then_histories() {
        let b = Batch::packed(&[(4, 10, 3), (1, 0, 1)]);
        assert_eq!(seq_table_values("t", &b).unwrap(), [0, 3, 4, 4, 1, 10, 0]);
    }

    #[test]
    fn positions_past_i32_and_short_offsets_are_shape_errors() {
        let far = Batch::single(0, i32::MAX as usize - 1, 2);
        assert!(seq_table_values("t", &far).is_err());
        let mut short = Batch::packed(&[(0, 0, 1), (1, 0, 1)]);
        short.cu_seqlens.pop();
        assert!(seq_table_values("t", &short).is_err());
    }

    #[test]
    fn arguments_fill_their_slots_and_count_past_the_limit() {
        let a = Args::new().i32(-1).f32(1.5).ptr(0xABC);
        assert_eq!(a.len, 3);
        assert_eq!(a.slots[0], u32::MAX as u64);
        assert_eq!(a.slots[1], 1.5f32.to_bits() as u64);
        assert_eq!(a.slots[2], 0xABC);
        let many = (0..MAX_ARGS + 1).fold(Args::new(), |a, i| a.u64(i as u64));
        assert_eq!(many.len, MAX_ARGS + 1);
    }
}
