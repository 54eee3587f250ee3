//! Shared vocabulary of Headroom.
//!
//! Every other crate speaks in these types: storage [`Dtype`]s and the
//! [`Element`] trait that converts them to f32, the per-layer [`LayerKind`]
//! the attention policy decides on, the attention [`Route`]s, the shape of a
//! prefill attention call ([`AttentionShape`]) with its typed errors, and the
//! fused-kernel capability table ([`fused_capability`]).

pub mod attention;
pub mod backend;
pub mod dtype;
pub mod fp8;
pub mod fused_capability;
pub mod layer;
pub mod ops;
pub mod progress;
pub mod tensor;

pub use attention::{AttentionError, AttentionReport, AttentionShape, Route, RouteRequest};
pub use backend::BackendKind;
pub use dtype::{Dtype, Element};
pub use layer::{AttentionKind, LayerKind};
pub use ops::{Backend, Batch, OpError, OpKey, OpResult, TimelineMark};
pub use tensor::{Tensor, TensorData};
