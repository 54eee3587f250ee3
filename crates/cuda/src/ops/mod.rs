//! The model's ops on the device, one folder each: the launcher beside its
//! `.cu` sources and their [`crate::kernels::KernelSource`] declarations.
//! Launchers take the device and the backend's tensors ([`crate::tensor`])
//! and queue work on the device's stream: attention, the gated delta rule
//! ([`gdn`]: chunked prefill, recurrent step, fused decode core), the mixture
//! of experts ([`moe`]: routing, grouped GEMMs, decode), the causal conv1d
//! ([`conv`]), the shape-general fallbacks of both ([`fallback`]), the
//! tensor-parallel partials ([`tp`]), the block-scaled FP8 weights'
//! GEMV, GEMM and quantization ([`fp8`]), and the dense ops.

pub mod attention;
pub mod conv;
pub mod fallback;
pub mod fp8;
pub mod gdn;
pub mod gemv;
pub(crate) mod kv;
pub(crate) mod linear;
pub mod moe;
pub(crate) mod norm;
pub(crate) mod pointwise;
pub(crate) mod rope;
pub(crate) mod sample;
pub mod state;
pub mod tp;
