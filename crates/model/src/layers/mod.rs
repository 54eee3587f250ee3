//! Decoder-layer building blocks of Qwen3.5 / Qwen3.6, written once against
//! the backend op set (`headroom_core::Backend`): gated full attention,
//! Gated DeltaNet, and the MLPs (sparse MoE + shared expert, or dense
//! SwiGLU). Activations are token-major `[T][features]`, rows packed over
//! the sequences of a `Batch`.

pub mod attention;
pub mod gdn;
pub mod mlp;

pub use attention::FullAttention;
pub use gdn::GatedDeltaNet;
pub use mlp::Mlp;
