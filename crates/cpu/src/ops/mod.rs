//! CPU ops of the Qwen3.5 / Qwen3.6 forward: f32 activations, weights kept
//! in their storage dtype and converted to f32 block by block on use.
//!
//! One file per op; each is tested against a straightforward f64
//! implementation written from the transformers reference.

pub mod activation;
pub mod conv1d;
pub mod gated_delta;
pub mod matmul;
pub mod moe;
pub mod rms_norm;
pub mod rope;

#[cfg(test)]
pub(crate) mod test_util;

pub use matmul::{linear, linear_seq, WeightView};
