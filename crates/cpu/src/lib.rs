//! Headroom's CPU backend: [`CpuBackend`] implements the backend op set
//! (`headroom_core::Backend`) with f32 activations over weights kept in their
//! storage dtype (f32, f16 or bf16), on rayon and the `gemm` crate.
//!
//! * [`ops`] — one file per op, each tested against a straightforward f64
//!   implementation written from the transformers reference;
//! * [`kv_cache`] — a layer's KV block pool, read through block tables;
//!   [`state`] — the slot pools the trait hands out;
//! * [`sample`] — greedy / temperature / top-k / top-p sampling;
//! * [`backend`] — the trait implementation (one method per op);
//! * [`comm`] — the in-process communicator of a tensor-parallel group;
//!   [`group`] — a group's backends and abort, for the model's `TpGroup::build`.
//!
//! Being the straightforward implementation, it is the reference the CUDA
//! backend is tested against.

mod act;
pub mod backend;
pub mod comm;
pub mod group;
pub mod kv_cache;
pub mod ops;
pub mod precision;
pub mod sample;
pub mod state;

pub use backend::{CpuAct, CpuBackend, CpuWeight};
pub use comm::{CpuComm, CpuRank};
pub use group::{cpu_group, CpuGroup, GroupAbort};
pub use precision::{ActRounding, Precision};
pub use state::{CpuGdnState, CpuKvCache};
