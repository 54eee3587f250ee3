//! A tensor-parallel group: one backend per device, joined by NCCL
//! communicators (`crate::nccl`).

use super::CudaBackend;
use crate::config::CudaOptions;
use crate::device::CudaDevice;
use crate::{nccl, CudaError};

/// One backend per device of `ordinals`, joined by NCCL communicators (a
/// single device: no NCCL, world size 1), each opened with the options of
/// the environment.
pub fn open_group(ordinals: &[usize]) -> Result<Vec<CudaBackend>, CudaError> {
    open_group_with(ordinals, &CudaOptions::from_env())
}

/// [`open_group`] with `options`.
pub fn open_group_with(
    ordinals: &[usize],
    options: &CudaOptions,
) -> Result<Vec<CudaBackend>, CudaError> {
    if ordinals.len() <= 1 {
        return ordinals
            .iter()
            .map(|&o| CudaBackend::open_with(o, options.clone()))
            .collect();
    }
    crate::libs::probe_driver()?;
    nccl::probe_nccl()?;
    let devices = ordinals
        .iter()
        .map(|&o| CudaDevice::open_with(o, options.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    let comms = nccl::init_all(ordinals, options)?;
    devices
        .into_iter()
        .zip(comms)
        .map(|(dev, comm)| CudaBackend::in_group(dev, comm))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_device_group_needs_no_nccl() {
        // No device here (or one): an ordinary error or one backend, never a panic.
        match open_group(&[0]) {
            Ok(b) => assert_eq!(b.len(), 1),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
        assert!(open_group(&[]).unwrap().is_empty());
    }
}
