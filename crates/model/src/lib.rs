//! The Qwen3.5 / Qwen3.6 hybrid model family: config, weights, tokenizer,
//! synthetic models and the forward, written once against the backend op
//! set (`headroom_core::ops::Backend`); it depends on no backend.

pub mod config;
pub mod files;
pub mod layers;
pub mod memory;
mod meter;
pub mod parallel;
pub mod profile;
pub mod qwen3_5;
pub mod step_model;
pub mod synthetic;
pub mod tokenizer;
pub mod weights;

pub use config::{ConfigError, ModelConfig};
pub use headroom_core::tensor::{self, Tensor, TensorData};
pub use parallel::{ShardPlan, TpGroup, TpSession, TpWeights};
pub use qwen3_5::{
    AttentionPlan, ForwardOptions, ForwardOutput, LayerState, LogitsRows, ModelError, ModelState,
    Qwen35Model, Session, StepOutput,
};
pub use step_model::{StepIds, StepModel};
pub use weights::{Weights, WeightsError};
