//! Headroom's CUDA backend.
//!
//! Layers, each using only the ones before it:
//! * Toolchain and device: [`config`] ([`config::CudaOptions`], the one
//!   place the environment is read), [`libs`] (driver, NVRTC and cuBLAS
//!   probed at run time: no toolkit at build time), [`nvrtc`] and [`cache`]
//!   (sources compiled for the running device and cached on disk),
//!   [`kernels`] (the registry of every embedded source), [`artifact`] (the
//!   kernel gate), [`device`] (context, stream, loaded kernels), [`alloc`]
//!   (the caching device allocator), [`blas`] (cuBLAS), [`nccl`].
//! * Launch plumbing: [`launch`] (argument packing, launches, device errors
//!   as op errors), [`tensor`] (the backend's device values), [`validate`]
//!   (shape checks), [`decode_stats`].
//! * [`ops`]: one folder per op, its launcher beside its `.cu` sources.
//! * [`backend`]: `CudaBackend`, the `headroom_core::Backend` trait mapped
//!   onto the ops; [`check`] and [`timing`] are the on-device correctness
//!   checks and the timing loop of the CLI and bench.

pub mod alloc;
pub mod artifact;
pub mod backend;
pub mod blas;
pub mod cache;
pub mod check;
pub mod config;
pub(crate) mod decode_stats;
pub mod device;
pub mod elf;
mod error;
pub mod event;
pub mod graph;
pub mod kernels;
pub(crate) mod launch;
pub mod libs;
pub mod nccl;
pub mod nvrtc;
pub mod ops;
pub(crate) mod profile_window;
pub mod tensor;
pub mod tensor_map;
pub mod timing;
pub(crate) mod validate;

pub use config::CudaOptions;
pub use error::CudaError;
/// Prefill attention (`ops::attention`), at the path the CLI and bench use.
pub use ops::attention;
