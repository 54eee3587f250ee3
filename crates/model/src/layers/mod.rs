//! Decoder-layer building blocks of Qwen3.5 / Qwen3.6, on the CPU ops:
//! gated full attention (with its KV cache), Gated DeltaNet (with its conv
//! and recurrent state) and the MLPs (sparse MoE + shared expert, or dense
//! SwiGLU). Activations are token-major `[T][features]` f32.

pub mod attention;
pub mod gdn;
pub mod kv_cache;
pub mod mlp;

pub use attention::FullAttention;
pub use gdn::{GatedDeltaNet, GdnState};
pub use kv_cache::KvCache;
pub use mlp::{Mlp, SparseMoe, SwiGlu};
