//! Kernel launches of the ops: argument packing, grid sizes, small host
//! tables uploaded per call, and the conversion of device errors to [`OpError`].

use crate::alloc::DeviceBuffer;
use crate::decode_stats::{timed, LAUNCHES, LAUNCH_NS};
use crate::device::CudaDevice;
use crate::CudaError;
use headroom_core::ops::{OpError, OpResult};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
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

/// A device error as an op error (attention's typed errors kept as such).
pub(crate) fn dev_err(e: CudaError) -> OpError {
    match e {
        CudaError::Attention(a) => OpError::Attention(a),
        other => OpError::Device(other.to_string()),
    }
}

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

/// Looks `entry` up, binds the context, counts the launch and hands the
/// function and the parameter pointers to `go` (the driver call, timed for
/// the decode statistics).
fn launch_params(
    dev: &CudaDevice,
    entry: &'static str,
    params: &mut [*mut c_void],
    go: impl FnOnce(crate::device::Function, &mut [*mut c_void]) -> Result<(), CudaError>,
) -> OpResult<()> {
    let f = dev.function(entry).map_err(dev_err)?;
    dev.bind().map_err(dev_err)?;
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let stats = dev.options().decode_stats;
    timed(stats, &LAUNCH_NS, || go(f, params)).map_err(dev_err)
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

/// The batch's sequence table for the varlen kernels, uploaded as i32:
/// `[cu_seqlens (n + 1)][slots (n)][history (n)]` (`3n + 1` values: far
/// fewer than per-row tables). Kernels find a row's sequence by binary
/// search over the first `n + 1`.
pub(crate) fn seq_table(
    dev: &CudaDevice,
    op: &'static str,
    batch: &headroom_core::ops::Batch,
) -> OpResult<Arc<DeviceBuffer>> {
    let n = batch.sequences();
    let mut table = Vec::with_capacity(3 * n + 1);
    for &r in &batch.cu_seqlens[..=n] {
        table.push(int(op, "row", r)?);
    }
    for &s in &batch.slots[..n] {
        table.push(int(op, "slot", s)?);
    }
    for i in 0..n {
        // Every position of the sequence's rows must fit i32, not only the first.
        let last = batch.history[i].saturating_add(batch.seq_len(i));
        int(op, "position", last)?;
        table.push(int(op, "position", batch.history[i])?);
    }
    upload(dev, &table)
}
