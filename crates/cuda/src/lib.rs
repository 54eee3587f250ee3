//! Headroom's CUDA backend.
//!
//! * No toolkit at build time: `cudarc` loads the driver, NVRTC and cuBLAS at
//!   run time; [`libs`] probes each first so a missing one is an ordinary error.
//! * Kernels are `.cu` sources embedded in the binary ([`kernels`]), compiled by
//!   NVRTC ([`nvrtc`]) for the running device and cached on disk ([`cache`]).
//! * The artifact gate ([`artifact`]) builds and verifies a folder of cubins.
//! * [`device`] owns the context, stream and loaded kernels; [`alloc`] is the
//!   caching device allocator (active and peak bytes); [`blas`] wraps cuBLAS.
//! * [`backend`] is `CudaBackend`, the model's op set on the device.
//! * [`attention`] runs prefill attention, fused or composed, with the same
//!   semantics and report as the CPU routes; [`check`] and [`timing`] are the
//!   on-device correctness checks and the timing loop used by the CLI and bench.

pub mod alloc;
pub mod artifact;
pub mod attention;
pub mod backend;
pub mod blas;
pub mod cache;
pub mod check;
pub mod device;
pub mod elf;
mod error;
pub mod kernels;
pub mod libs;
pub mod nccl;
pub mod nvrtc;
pub mod ops;
pub mod timing;

pub use error::CudaError;
