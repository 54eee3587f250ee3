//! One CUDA device: its primary context (bound once per thread, [`bind`]),
//! a stream, the kernels loaded from the disk cache (or compiled by NVRTC on
//! first use) in a lock-free table ([`functions`]), the caching allocator,
//! the small read-only tables the ops share ([`tables`]) and the cuBLAS
//! handle.

mod bind;
pub(crate) mod capture;
mod functions;
pub mod pinned;
mod tables;

pub use bind::forget as forget_bound_context;
pub use functions::Function;

use crate::alloc::{Allocator, DeviceBuffer, RawMemory};
use crate::blas::Blas;
use crate::config::CudaOptions;
use crate::decode_stats::{counted, LAUNCHES, LAUNCH_NS};
use crate::event::EventStream;
use crate::kernels::KernelSource;
use crate::{cache, kernels, libs, CudaError};
use cudarc::driver::{result, sys};
use functions::FunctionTable;
use headroom_core::ops::{Batch, OpError, OpResult};
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use tables::{BatchKey, TableCache, TableSink};

/// Context-bound raw memory from the driver.
struct DriverMemory {
    ctx: Ctx,
}

#[derive(Clone, Copy)]
struct Ctx(sys::CUcontext);
// SAFETY: a CUDA context handle may be used from any thread once made current there.
unsafe impl Send for Ctx {}
unsafe impl Sync for Ctx {}

impl Ctx {
    /// Makes the context current on the calling thread unless this crate
    /// already did ([`bind`]).
    fn bind(self) -> Result<(), CudaError> {
        bind::bind_with(self.0 as usize, || {
            // SAFETY: the context is retained for the process lifetime.
            unsafe { result::ctx::set_current(self.0) }.map_err(CudaError::from)
        })
    }
}

impl RawMemory for DriverMemory {
    fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
        self.ctx.bind()?;
        // SAFETY: the context is live for the allocator's lifetime.
        unsafe { Ok(result::malloc_sync(bytes)?) }
    }
    fn free(&self, ptr: u64) {
        let _ = self.ctx.bind();
        // SAFETY: `ptr` came from malloc_sync in this context and is freed once.
        unsafe {
            match result::free_sync(ptr) {
                // At process exit the driver may already be torn down: the
                // memory goes with the context, nothing to report.
                Err(e) if e.0 == sys::CUresult::CUDA_ERROR_DEINITIALIZED => {}
                Err(e) => tracing::warn!(error = %e, "cuMemFree failed"),
                Ok(()) => {}
            }
        }
    }
}

pub struct CudaDevice {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    /// NVRTC target, e.g. `sm_90a`.
    pub arch: String,
    pub sm_count: usize,
    ctx: Ctx,
    stream: Stream,
    functions: FunctionTable,
    alloc: Arc<Allocator>,
    blas: OnceLock<Blas>,
    /// Zeroed u32 counters for kernels whose last CTA finishes the work
    /// (each such kernel resets its counter before it exits).
    tickets: OnceLock<DeviceBuffer>,
    /// Small read-only tables by content ([`CudaDevice::upload_table`]).
    tables: TableCache<Vec<u8>>,
    /// Batches' sequence tables by batch ([`CudaDevice::seq_table_with`]).
    seq_tables: TableCache<BatchKey>,
    /// Page-locked buffers of the sampled tokens read after the next step
    /// is queued ([`CudaDevice::pinned`]).
    pinned: Arc<pinned::PinnedPool>,
    /// A step being recorded as a graph ([`capture`], `crate::graph`).
    capture: capture::Capture,
    /// Whether [`CudaDevice::launch_programmatic`] asks for programmatic
    /// dependent launch (on by default where the device has it).
    programmatic: AtomicBool,
    options: CudaOptions,
}

/// Tables kept by [`CudaDevice::upload_table`], and the largest one kept.
const TABLES_KEPT: usize = 16;
const TABLE_BYTES: usize = 64 << 10;
/// Batches whose sequence tables are kept (a step has one; a test or a
/// chunked prefill may alternate between a few).
const SEQ_TABLES_KEPT: usize = 4;

/// Counters in [`CudaDevice::ticket`].
pub const TICKETS: usize = 64;

#[derive(Clone, Copy)]
struct Stream(sys::CUstream);
// SAFETY: streams are usable from any thread of their context.
unsafe impl Send for Stream {}
unsafe impl Sync for Stream {}

impl CudaDevice {
    /// Opens device `ordinal` with the options of the environment
    /// ([`CudaOptions::from_env`]), or says why CUDA is unavailable.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        CudaDevice::open_with(ordinal, CudaOptions::from_env())
    }

    /// Opens device `ordinal` with `options`, or says why CUDA is unavailable.
    pub fn open_with(ordinal: usize, options: CudaOptions) -> Result<Self, CudaError> {
        libs::probe_driver()?;
        result::init()?;
        let count = result::device::get_count()?;
        if ordinal as i32 >= count {
            return Err(CudaError::NoDevice(format!(
                "device {ordinal} requested, {count} present"
            )));
        }
        let dev = result::device::get(ordinal as i32)?;
        // SAFETY: `dev` is a valid device; the primary context is retained for the process.
        let ctx = Ctx(unsafe { result::primary_ctx::retain(dev)? });
        ctx.bind()?;
        let attr = |a| unsafe { result::device::get_attribute(dev, a) };
        use sys::CUdevice_attribute::*;
        let capability = (
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        if capability.0 < 8 {
            return Err(CudaError::NoDevice(format!(
                "compute capability {}.{} < 8.0 (the kernels need mma.sync bf16 and cp.async)",
                capability.0, capability.1
            )));
        }
        let sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as usize;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)?;
        Ok(CudaDevice {
            ordinal,
            name: result::device::get_name(dev)?,
            capability,
            arch: options.arch_for(capability.0, capability.1),
            sm_count,
            ctx,
            stream: Stream(stream),
            functions: FunctionTable::new(),
            alloc: Allocator::new(Box::new(DriverMemory { ctx })),
            blas: OnceLock::new(),
            tickets: OnceLock::new(),
            tables: TableCache::new(TABLES_KEPT),
            seq_tables: TableCache::new(SEQ_TABLES_KEPT),
            pinned: Arc::default(),
            capture: capture::Capture::default(),
            programmatic: AtomicBool::new(true),
            options,
        })
    }

    /// The options the device was opened with.
    pub fn options(&self) -> &CudaOptions {
        &self.options
    }

    /// Loads every kernel module of `sources` now: from the disk cache, or
    /// compiled on this first run (with progress events, `crate::cache`).
    /// Every entry point must be in the kernel registry (`crate::kernels`).
    pub fn load_kernels(&self, sources: &[KernelSource]) -> Result<(), CudaError> {
        let _cold = self.functions.cold();
        let missing: Vec<KernelSource> = sources
            .iter()
            .filter(|s| s.entry_points.iter().any(|e| !self.functions.has(e)))
            .copied()
            .collect();
        if let Some(e) = missing
            .iter()
            .flat_map(|s| s.entry_points.iter())
            .find(|e| functions::slot_of(e).is_none())
        {
            return Err(CudaError::UnknownEntryPoint((*e).into()));
        }
        let cubins = cache::cubins(&missing, &self.arch, &self.options)?;
        for (src, cubin) in missing.iter().zip(&cubins) {
            self.load_module(src, cubin)?;
        }
        Ok(())
    }

    /// Loads one compiled module and records its entry points.
    fn load_module(&self, src: &KernelSource, cubin: &[u8]) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: `cubin` is a complete image for this device's architecture.
        let module = unsafe { result::module::load_data(cubin.as_ptr() as *const c_void)? };
        for e in src.entry_points {
            let name = CString::new(*e).expect("entry names have no NUL");
            // SAFETY: `module` is loaded; names come from the source's own list.
            let f = unsafe { result::module::get_function(module, name)? };
            self.functions.insert(e, f);
        }
        Ok(())
    }

    /// Makes this device's context current on the calling thread: one
    /// driver call on a thread's first use of the device (or after it used
    /// another), a thread-local comparison after that. Every method of the
    /// device that calls the driver binds first.
    pub fn bind(&self) -> Result<(), CudaError> {
        self.ctx.bind()
    }

    pub fn stream_raw(&self) -> sys::CUstream {
        self.stream.0
    }

    pub fn allocator(&self) -> &Arc<Allocator> {
        &self.alloc
    }

    /// cuBLAS on this device's stream (created on first use).
    pub fn blas(&self) -> Result<&Blas, CudaError> {
        self.bind()?;
        if let Some(b) = self.blas.get() {
            return Ok(b);
        }
        let b = Blas::new(self.stream.0)?;
        Ok(self.blas.get_or_init(|| b))
    }

    /// The device address of ticket counter `i` (< [`TICKETS`]): a u32 that
    /// is zero before each launch of the one kernel that owns it (zeroed on
    /// the stream at first use; the kernel's last CTA resets it).
    pub fn ticket(&self, i: usize) -> Result<u64, CudaError> {
        if i >= TICKETS {
            return Err(CudaError::Shape {
                op: "ticket",
                detail: format!("counter {i} of {TICKETS}"),
            });
        }
        let base = match self.tickets.get() {
            Some(b) => b.ptr(),
            None => {
                let buf = self.alloc(TICKETS * 4)?;
                self.fill_bytes(&buf, 0)?;
                self.tickets.get_or_init(|| buf).ptr()
            }
        };
        Ok(base + 4 * i as u64)
    }

    /// The function `entry` (a lock-free lookup once its module is loaded:
    /// `CudaBackend::open` loads them all); on a first use, loads the module
    /// that exports it (compiling or reading the disk cache).
    pub fn function(&self, entry: &'static str) -> Result<Function, CudaError> {
        if let Some(f) = self.functions.get(entry) {
            return Ok(f);
        }
        let src =
            kernels::source_of(entry).ok_or_else(|| CudaError::UnknownEntryPoint(entry.into()))?;
        self.load_kernels(std::slice::from_ref(src))?;
        self.functions
            .get(entry)
            .ok_or_else(|| CudaError::UnknownEntryPoint(entry.into()))
    }

    /// Allows `f` up to `bytes` of dynamic shared memory: a driver call only
    /// the first time `f` needs more than it was allowed before.
    pub fn set_dynamic_smem(&self, f: Function, bytes: usize) -> Result<(), CudaError> {
        if !self.functions.needs_smem(f, bytes) {
            return Ok(());
        }
        let _cold = self.functions.cold();
        if !self.functions.needs_smem(f, bytes) {
            return Ok(());
        }
        let limit = i32::try_from(bytes)
            .map_err(|_| CudaError::InvalidLaunch(format!("{bytes} bytes of shared memory")))?;
        self.bind()?;
        // SAFETY: `f` is a loaded function of this context.
        unsafe {
            result::function::set_function_attribute(
                f.raw,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                limit,
            )?
        };
        self.functions.allowed_smem(f, bytes);
        Ok(())
    }

    /// Launches `f` on this device's stream.
    ///
    /// # Safety
    /// `params` must match the kernel's signature, and every pointer in them must
    /// address device memory large enough for what the kernel touches.
    pub unsafe fn launch(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: usize,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        self.bind()?;
        self.before_launch(f);
        counted(self.options.decode_stats, &LAUNCHES, &LAUNCH_NS, || {
            result::launch_kernel(f.raw, grid, block, smem as u32, self.stream.0, params)
        })?;
        Ok(())
    }

    /// [`Self::launch`] with programmatic dependent launch (compute
    /// capability 9.0+, else a plain launch): `f` may start before the
    /// previous kernel on the stream has finished.
    ///
    /// # Safety
    /// As [`Self::launch`]; besides, `f` must execute `griddepcontrol.wait`
    /// before it reads anything an earlier kernel wrote and before it writes
    /// any buffer (only constant data, e.g. weights, may be read before).
    pub unsafe fn launch_programmatic(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: usize,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        if self.capability.0 < 9 || !self.programmatic.load(Ordering::Relaxed) {
            return self.launch(f, grid, block, smem, params);
        }
        self.bind()?;
        let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: smem as u32,
            hStream: self.stream.0,
            attrs: &mut attr,
            numAttrs: 1,
        };
        self.before_launch(f);
        counted(self.options.decode_stats, &LAUNCHES, &LAUNCH_NS, || {
            sys::cuLaunchKernelEx(&config, f.raw, params.as_mut_ptr(), std::ptr::null_mut())
                .result()
        })?;
        Ok(())
    }

    /// Before launching `f`: the decode statistics' probe
    /// (`crate::decode_stats`), or while a step is recorded `f` in the
    /// capture's signature (the graph's launch is probed instead).
    fn before_launch(&self, f: Function) {
        if self.capture.active() {
            self.capture.mix(&[f.raw as u64]);
        } else {
            crate::decode_stats::before_launch(self.options.decode_stats, self);
        }
    }

    /// Turns programmatic dependent launch off (every kernel then starts
    /// after the one before it has finished) or back on: the GPU tests
    /// compare the two (`crates/engine/tests/cuda_graphs.rs`).
    pub fn set_programmatic_launch(&self, on: bool) {
        self.programmatic.store(on, Ordering::Relaxed);
    }

    /// The device's capture state (`crate::graph` starts and ends it).
    pub(crate) fn capture(&self) -> &capture::Capture {
        &self.capture
    }

    /// Refuses `what` while a step is recorded: it waits for the device,
    /// which would end the capture. Counts it otherwise
    /// ([`capture::Capture::waits`]).
    fn refuse_while_capturing(&self, what: &str) -> Result<(), CudaError> {
        self.capture.count_wait();
        if self.capture.active() {
            return Err(CudaError::InvalidLaunch(format!(
                "{what} waits for the device, which a step being recorded as a CUDA graph cannot \
                 do (run with --cuda-graphs off)"
            )));
        }
        Ok(())
    }

    /// A device buffer of `bytes` bytes from the caching allocator.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        self.bind()?;
        self.alloc.alloc(bytes)
    }

    /// Copies host data into a fresh device buffer.
    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<DeviceBuffer, CudaError> {
        let buf = self.alloc(std::mem::size_of_val(data))?;
        self.write(&buf, data)?;
        Ok(buf)
    }

    /// Overwrites the start of `buf` with `data` (synchronous).
    pub fn write<T: Copy>(&self, buf: &DeviceBuffer, data: &[T]) -> Result<(), CudaError> {
        assert!(
            std::mem::size_of_val(data) <= buf.len_bytes(),
            "write past the buffer"
        );
        self.refuse_while_capturing("a synchronous copy to the device")?;
        self.synchronize()?;
        // SAFETY: the buffer holds at least `data`'s bytes (checked above).
        unsafe { result::memcpy_htod_sync(buf.ptr(), data)? };
        Ok(())
    }

    /// Copies host data into a fresh device buffer, ordered on this device's
    /// stream (no host synchronisation): the driver stages pageable host
    /// memory before returning, so `data` may be dropped right after, and the
    /// copy runs after every kernel queued before it — a buffer the caching
    /// allocator recycled from an earlier kernel is not overwritten early.
    /// While a step is recorded the copy is held until its capture ends
    /// ([`capture`]).
    pub fn upload_async<T: Copy>(&self, data: &[T]) -> Result<Arc<DeviceBuffer>, CudaError> {
        let buf = Arc::new(TableSink::alloc(self, std::mem::size_of_val(data).max(1))?);
        if !data.is_empty() {
            TableSink::write(self, &buf, tables::bytes_of(data))?;
        }
        Ok(buf)
    }

    /// A device copy of a small table that kernels only read (positions,
    /// slots, row indices), shared with earlier calls that uploaded the same
    /// bytes: within a decode step every layer uploads the same few tables,
    /// and each upload is a host call plus a copy in the stream's order. The
    /// last [`TABLES_KEPT`] tables of at most [`TABLE_BYTES`] are kept in
    /// persistent buffers (`tables`).
    /// Nothing may write to the returned buffer.
    pub fn upload_table<T: Copy>(&self, data: &[T]) -> Result<Arc<DeviceBuffer>, CudaError> {
        let raw = tables::bytes_of(data);
        if raw.len() > TABLE_BYTES {
            return self.upload_async(data);
        }
        self.tables.get(
            self,
            |k| k.as_slice() == raw,
            || Ok((raw.to_vec(), raw.to_vec())),
            |e| e,
        )
    }

    /// The device copy of `batch`'s sequence table: the one every op of the
    /// step reads (built by `build` and copied once per distinct batch, found
    /// by comparing the batch's row offsets, slots and histories after that).
    /// Nothing may write to the returned buffer.
    pub(crate) fn seq_table_with(
        &self,
        batch: &Batch,
        build: impl FnOnce() -> OpResult<Vec<i32>>,
        device_error: impl Fn(CudaError) -> OpError,
    ) -> OpResult<Arc<DeviceBuffer>> {
        self.seq_tables.get(
            self,
            |k| k.matches(batch),
            || Ok((BatchKey::of(batch), tables::bytes_of(&build()?).to_vec())),
            device_error,
        )
    }

    /// Copies the start of `buf` into `out` (synchronous).
    pub fn read<T: Copy>(&self, buf: &DeviceBuffer, out: &mut [T]) -> Result<(), CudaError> {
        assert!(
            std::mem::size_of_val(out) <= buf.len_bytes(),
            "read past the buffer"
        );
        self.refuse_while_capturing("a read of device memory")?;
        self.synchronize()?;
        // SAFETY: the buffer holds at least `out`'s bytes (checked above).
        unsafe { result::memcpy_dtoh_sync(out, buf.ptr())? };
        Ok(())
    }

    /// A page-locked host buffer of at least `bytes` (kept buffers reused).
    pub fn pinned(&self, bytes: usize) -> Result<pinned::Pinned, CudaError> {
        self.bind()?;
        Ok(self.pinned.take(bytes)?)
    }

    /// Queues a copy of `bytes` bytes of `buf` into `host` on the stream
    /// (asynchronous: `host` must stay alive, and unread, until an event
    /// recorded after it completes).
    pub fn copy_to_pinned(
        &self,
        buf: &DeviceBuffer,
        host: &pinned::Pinned,
        bytes: usize,
    ) -> Result<(), CudaError> {
        assert!(
            bytes <= buf.len_bytes() && bytes <= host.len_bytes(),
            "copy past a buffer"
        );
        self.bind()?;
        // SAFETY: both ranges hold `bytes` (checked above); the caller keeps
        // `host` until the copy's event.
        unsafe { sys::cuMemcpyDtoHAsync_v2(host.ptr(), buf.ptr(), bytes, self.stream.0).result()? };
        Ok(())
    }

    /// Fills `buf` with the byte `value` on the stream (0xFF: NaN in f16 and bf16).
    pub fn fill_bytes(&self, buf: &DeviceBuffer, value: u8) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: the range is the buffer's own.
        unsafe { result::memset_d8_async(buf.ptr(), value, buf.len_bytes(), self.stream.0)? };
        Ok(())
    }

    /// Waits for all work on this device's stream.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.refuse_while_capturing("a device synchronisation")?;
        self.bind()?;
        // SAFETY: the stream is live.
        unsafe { result::stream::synchronize(self.stream.0)? };
        Ok(())
    }
}

impl EventStream for CudaDevice {
    fn bind_context(&self) -> Result<(), CudaError> {
        self.bind()
    }

    fn raw_stream(&self) -> sys::CUstream {
        self.stream_raw()
    }
}

impl TableSink for CudaDevice {
    fn used(&self, buf: &Arc<DeviceBuffer>) {
        if self.capture.active() {
            self.capture.hold(buf, &[]);
        }
    }

    /// While a step is recorded, a block no kernel of the step touched: the
    /// table's copy lands before the graph runs ([`capture`]).
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        if self.capture.active() {
            self.bind()?;
            return self.alloc.alloc_untouched(bytes);
        }
        CudaDevice::alloc(self, bytes)
    }

    fn write(&self, buf: &Arc<DeviceBuffer>, data: &[u8]) -> Result<(), CudaError> {
        if data.len() > buf.len_bytes() {
            return Err(CudaError::InvalidLaunch(format!(
                "a {}-byte table in a {}-byte buffer",
                data.len(),
                buf.len_bytes()
            )));
        }
        if self.capture.active() {
            self.capture.hold(buf, data);
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the buffer holds `data` (checked above); the stream is live.
        // Pageable memory is staged before the call returns.
        unsafe { result::memcpy_htod_async(buf.ptr(), data, self.stream.0)? };
        Ok(())
    }
}
