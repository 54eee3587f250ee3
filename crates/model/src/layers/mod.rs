//! Decoder-layer building blocks of Qwen3.5 / Qwen3.6, written once against
//! the backend op set (`headroom_core::Backend`): gated full attention,
//! Gated DeltaNet, and the MLPs (sparse MoE + shared expert, or dense
//! SwiGLU). Activations are token-major `[T][features]`, rows packed over
//! the sequences of a `Batch`.
//!
//! Under tensor parallelism each layer holds its rank's heads / experts /
//! rows and returns a partial sum of the output projection; [`reduce`]
//! (one all-reduce per mixer and per MLP) makes it the full output.

pub mod attention;
pub mod gdn;
pub mod mlp;

pub use attention::FullAttention;
pub use gdn::GatedDeltaNet;
pub use mlp::{LayerOut, Mlp};

use crate::profile::{Part, Profiler};
use headroom_core::ops::{Backend, OpResult};

/// `y` summed over the ranks of the backend's group (nothing to do, and no
/// profile entry, outside a group).
pub(crate) fn reduce<B: Backend>(be: &B, mut y: B::Act, prof: &Profiler) -> OpResult<B::Act> {
    if be.world_size() > 1 {
        prof.time(be, Part::Comm, || be.all_reduce_sum(&mut y))?;
    }
    Ok(y)
}
