//! Thread-block cluster launches (compute capability 9.0+): a kernel launched
//! in clusters of `cluster` CTAs along x ([`CudaDevice::launch_cluster`]),
//! and how many such clusters are resident at once
//! ([`CudaDevice::max_active_clusters`]: the grid of a persistent cluster
//! kernel; clusters past it would run after the resident ones, a tail).

use super::{counted, CudaDevice, Function, LAUNCHES, LAUNCH_NS};
use crate::CudaError;
use cudarc::driver::sys;
use std::ffi::c_void;

/// The launch configuration of `grid` CTAs of `block` threads in clusters of
/// `cluster` along x (`attr` must outlive the returned config's use).
fn config(
    grid: u32,
    block: u32,
    smem: usize,
    stream: sys::CUstream,
    attr: &mut sys::CUlaunchAttribute,
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: grid,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem as u32,
        hStream: stream,
        attrs: attr,
        numAttrs: 1,
    }
}

/// The cluster-dimension attribute of clusters of `cluster` CTAs along x.
fn cluster_attr(cluster: u32) -> sys::CUlaunchAttribute {
    // SAFETY: an all-zero launch attribute is a valid value of the C union.
    let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
    attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = cluster;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
    attr
}

/// Checks a cluster launch's shape: clusters of 1 to 8 CTAs (the portable
/// limit), a grid of whole clusters, at least one.
pub fn check_cluster_grid(grid: usize, cluster: usize) -> Result<(), CudaError> {
    if !(1..=8).contains(&cluster)
        || grid == 0
        || !grid.is_multiple_of(cluster)
        || grid > u32::MAX as usize
    {
        return Err(CudaError::InvalidLaunch(format!(
            "a grid of {grid} CTAs in clusters of {cluster}"
        )));
    }
    Ok(())
}

impl CudaDevice {
    /// Launches `f` on this device's stream in clusters of `cluster` CTAs
    /// along x (`grid` a multiple of it; `f` must allow `smem` bytes of
    /// dynamic shared memory: [`CudaDevice::set_dynamic_smem`]).
    ///
    /// # Safety
    /// As [`CudaDevice::launch`].
    pub unsafe fn launch_cluster(
        &self,
        f: Function,
        grid: usize,
        block: u32,
        smem: usize,
        cluster: usize,
        params: &mut [*mut c_void],
    ) -> Result<(), CudaError> {
        check_cluster_grid(grid, cluster)?;
        if self.capability.0 < 9 {
            return Err(CudaError::InvalidLaunch(format!(
                "clusters need compute capability 9.0, not {}.{}",
                self.capability.0, self.capability.1
            )));
        }
        self.bind()?;
        let mut attr = cluster_attr(cluster as u32);
        let config = config(grid as u32, block, smem, self.stream.0, &mut attr);
        counted(self.options.decode_stats, &LAUNCHES, &LAUNCH_NS, || {
            sys::cuLaunchKernelEx(&config, f.raw, params.as_mut_ptr(), std::ptr::null_mut())
                .result()
        })?;
        Ok(())
    }

    /// Clusters of `cluster` CTAs of `block` threads and `smem` bytes of
    /// dynamic shared memory (allowed to `f` before) resident at once.
    pub fn max_active_clusters(
        &self,
        f: Function,
        block: u32,
        smem: usize,
        cluster: usize,
    ) -> Result<usize, CudaError> {
        check_cluster_grid(cluster, cluster)?;
        self.bind()?;
        let mut attr = cluster_attr(cluster as u32);
        let config = config(cluster as u32, block, smem, self.stream.0, &mut attr);
        let mut n = 0i32;
        // SAFETY: `f` is a loaded function of this context; `config` and
        // `attr` live across the call.
        unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f.raw, &config) }.result()?;
        Ok(n.max(0) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_grids_are_whole_clusters_of_one_to_eight() {
        assert!(check_cluster_grid(132, 2).is_ok());
        assert!(check_cluster_grid(2, 2).is_ok());
        assert!(check_cluster_grid(7, 1).is_ok());
        assert!(check_cluster_grid(133, 2).is_err());
        assert!(check_cluster_grid(0, 2).is_err());
        assert!(check_cluster_grid(16, 16).is_err());
        assert!(check_cluster_grid(4, 0).is_err());
        let a = cluster_attr(2);
        // SAFETY: the attribute was written as a cluster dimension.
        let d = unsafe { a.value.clusterDim };
        assert_eq!((d.x, d.y, d.z), (2, 1, 1));
    }
}
