//! The model's ops on the device, one folder each: the launcher beside its
//! `.cu` sources and their [`crate::kernels::KernelSource`] declarations.
//! Launchers take the device and the backend's tensors ([`crate::tensor`])
//! and queue work on the device's stream.

pub mod attention;
pub mod gdn;
pub mod gemv;
pub(crate) mod kv;
pub(crate) mod linear;
pub mod moe;
pub(crate) mod norm;
pub(crate) mod pointwise;
pub(crate) mod rope;
pub(crate) mod sample;
