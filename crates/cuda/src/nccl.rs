//! NCCL for tensor parallelism: one communicator per rank of a group of
//! devices driven by one process (a thread per device), loaded at run time
//! like the other CUDA libraries (cudarc's `nccl` bindings, dynamic
//! loading: no toolkit at build time). Every collective is queued on the
//! rank's own stream, so it orders with the rank's kernels and the host
//! never waits for it.
//!
//! NVLink multicast (NVLS) is left off: [`init_all`] sets
//! `NCCL_NVLS_ENABLE=0` before creating the communicators (unless the user
//! set it), as the lent multi-GPU machines require. The group of backends is
//! `crate::backend::open_group`.

use crate::config::CudaOptions;
use crate::device::CudaDevice;
use crate::tensor::CudaAct;
use crate::CudaError;
use cudarc::driver::sys as drv;
use cudarc::nccl::{result, sys};
use headroom_core::Dtype;

/// NCCL (`libnccl.so`), needed by `--tensor-parallel` above 1 on CUDA.
pub fn probe_nccl() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen candidate library names.
    if unsafe { sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::LibraryMissing {
            library: "NCCL (libnccl.so)",
            hint: "it comes with the PyPI package nvidia-nccl-cu13 (site-packages/nvidia/nccl/lib \
                   holds libnccl.so.2): put that folder on LD_LIBRARY_PATH and, if only \
                   libnccl.so.2 is there, link libnccl.so to it",
        })
    }
}

fn nccl_err(what: &str, e: result::NcclError) -> CudaError {
    CudaError::Driver(format!("NCCL {what}: {e:?}"))
}

/// One rank's communicator.
#[derive(Debug)]
pub struct NcclComm {
    comm: sys::ncclComm_t,
    pub rank: usize,
    pub world: usize,
}

// SAFETY: a communicator is used by one rank's thread at a time (each
// backend owns its own); NCCL communicators may move between threads.
unsafe impl Send for NcclComm {}
unsafe impl Sync for NcclComm {}

impl Drop for NcclComm {
    fn drop(&mut self) {
        // SAFETY: `comm` came from ncclCommInitAll and is destroyed once.
        let _ = unsafe { result::comm_destroy(self.comm) };
    }
}

/// Devices this process can see.
pub fn visible_devices() -> Result<usize, CudaError> {
    crate::libs::probe_driver()?;
    cudarc::driver::result::init()?;
    Ok(cudarc::driver::result::device::get_count()? as usize)
}

/// One communicator per device of `ordinals` (each device already opened),
/// rank `i` on `ordinals[i]`.
pub fn init_all(ordinals: &[usize], options: &CudaOptions) -> Result<Vec<NcclComm>, CudaError> {
    probe_nccl()?;
    if !options.nccl_nvls_from_user {
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
    }
    let n = ordinals.len();
    let list: Vec<i32> = ordinals.iter().map(|&o| o as i32).collect();
    let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); n];
    // SAFETY: `comms` has room for n communicators, `list` names n devices.
    unsafe { result::comm_init_all(comms.as_mut_ptr(), n as i32, list.as_ptr()) }
        .map_err(|e| nccl_err("init", e))?;
    // NCCL selected each device in turn on this thread: the next bind sets
    // the context again (`CudaDevice::bind`).
    crate::device::forget_bound_context();
    Ok(comms
        .into_iter()
        .enumerate()
        .map(|(rank, comm)| NcclComm {
            comm,
            rank,
            world: n,
        })
        .collect())
}

fn nccl_dtype(d: Dtype) -> Result<sys::ncclDataType_t, CudaError> {
    match d {
        Dtype::Bf16 => Ok(sys::ncclDataType_t::ncclBfloat16),
        Dtype::F16 => Ok(sys::ncclDataType_t::ncclFloat16),
        Dtype::F32 => Ok(sys::ncclDataType_t::ncclFloat32),
    }
}

impl NcclComm {
    fn stream(dev: &CudaDevice) -> sys::cudaStream_t {
        dev.stream_raw() as sys::cudaStream_t
    }

    /// In place, the sum over the group of `x`, on `dev`'s stream.
    pub fn all_reduce_sum(&self, dev: &CudaDevice, x: &mut CudaAct) -> Result<(), CudaError> {
        let n = x.elems();
        if n == 0 {
            return Ok(());
        }
        dev.bind()?;
        let ptr = x.ptr() as *mut std::ffi::c_void;
        // SAFETY: x holds n elements of its dtype on this rank's device; the
        // in-place all-reduce reads and writes only those.
        unsafe {
            result::all_reduce(
                ptr,
                ptr,
                n,
                nccl_dtype(x.dtype)?,
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                Self::stream(dev),
            )
        }
        .map_err(|e| nccl_err("all-reduce", e))?;
        Ok(())
    }

    /// Reduce-scatter: rank `r` receives the group's sum of elements
    /// `r·count .. (r+1)·count` of every rank's `send` (`world · count`
    /// elements of `dtype`) in `recv` (`count`), on `dev`'s stream.
    ///
    /// # Safety
    /// `send` and `recv` must address `world · count` and `count` elements of
    /// `dtype` on this rank's device.
    pub(crate) unsafe fn reduce_scatter_sum(
        &self,
        dev: &CudaDevice,
        send: u64,
        recv: u64,
        count: usize,
        dtype: Dtype,
    ) -> Result<(), CudaError> {
        dev.bind()?;
        result::reduce_scatter(
            send as *const std::ffi::c_void,
            recv as *mut std::ffi::c_void,
            count,
            nccl_dtype(dtype)?,
            sys::ncclRedOp_t::ncclSum,
            self.comm,
            Self::stream(dev),
        )
        .map_err(|e| nccl_err("reduce-scatter", e))?;
        Ok(())
    }

    /// All-gather, rank-major: `recv` (`world · count` elements) receives
    /// every rank's `send` (`count` elements of `dtype`) in rank order.
    ///
    /// # Safety
    /// `send` and `recv` must address `count` and `world · count` elements of
    /// `dtype` on this rank's device.
    pub(crate) unsafe fn all_gather_flat(
        &self,
        dev: &CudaDevice,
        send: u64,
        recv: u64,
        count: usize,
        dtype: Dtype,
    ) -> Result<(), CudaError> {
        dev.bind()?;
        result::all_gather(
            send as *const std::ffi::c_void,
            recv as *mut std::ffi::c_void,
            count,
            nccl_dtype(dtype)?,
            self.comm,
            Self::stream(dev),
        )
        .map_err(|e| nccl_err("all-gather", e))?;
        Ok(())
    }

    /// Every rank's `[rows][cols]` side by side: `[rows][world · cols]`.
    pub fn all_gather_cols(
        &self,
        dev: &CudaDevice,
        x: &CudaAct,
        out: &CudaAct,
        staging: Option<&CudaAct>,
    ) -> Result<(), CudaError> {
        let n = x.elems();
        let es = x.dtype.size_bytes();
        dev.bind()?;
        // Rank-major [world][rows][cols] first (straight into `out` for one row).
        let gathered = staging.unwrap_or(out);
        // SAFETY: x holds n elements, `gathered` world · n (checked by the caller).
        unsafe {
            result::all_gather(
                x.ptr() as *const std::ffi::c_void,
                gathered.ptr() as *mut std::ffi::c_void,
                n,
                nccl_dtype(x.dtype)?,
                self.comm,
                Self::stream(dev),
            )
        }
        .map_err(|e| nccl_err("all-gather", e))?;
        let Some(staging) = staging else {
            return Ok(());
        };
        // Then rank r's block into columns r·cols.. of every row.
        for r in 0..self.world {
            let copy = drv::CUDA_MEMCPY2D {
                srcXInBytes: 0,
                srcY: 0,
                srcMemoryType: drv::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                srcHost: std::ptr::null(),
                srcDevice: staging.ptr() + (r * n * es) as u64,
                srcArray: std::ptr::null_mut(),
                srcPitch: x.cols * es,
                dstXInBytes: r * x.cols * es,
                dstY: 0,
                dstMemoryType: drv::CUmemorytype::CU_MEMORYTYPE_DEVICE,
                dstHost: std::ptr::null_mut(),
                dstDevice: out.ptr(),
                dstArray: std::ptr::null_mut(),
                dstPitch: self.world * x.cols * es,
                WidthInBytes: x.cols * es,
                Height: x.rows,
            };
            // SAFETY: both regions lie inside their buffers (rows × cols
            // elements of each rank's block; rows × world·cols of `out`).
            let rc = unsafe { drv::cuMemcpy2DAsync_v2(&copy, dev.stream_raw()) };
            if rc != drv::CUresult::CUDA_SUCCESS {
                return Err(CudaError::Driver(format!("gathering logits: {rc:?}")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_probe_answers_without_panicking() {
        match probe_nccl() {
            Ok(()) => {}
            Err(e) => assert!(e.to_string().contains("libnccl"), "{e}"),
        }
    }
}
