//! The Qwen3.5 / Qwen3.6 hybrid model family: config, weights, tokenizer,
//! synthetic models and the CPU forward.

pub mod config;
pub mod ops;
pub mod synthetic;
pub mod tensor;
pub mod tokenizer;
pub mod weights;

pub use config::{ConfigError, ModelConfig};
pub use tensor::{Tensor, TensorData};
pub use weights::{Weights, WeightsError};
