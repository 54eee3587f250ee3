//! Benchmarks with JSON evidence.
//!
//! * [`backend::AttentionBenchBackend`]: what a backend offers the attention
//!   bench; [`backends::backend_for`] picks the CPU or CUDA one.
//! * [`attention`]: the backend-generic A/B runner over lengths and routes,
//!   writing [`schema::AttentionBenchFile`] (`headroom.bench.attention/1`).
//! * [`gemm_baseline`]: the square f32 GEMM the CPU bars are measured against.

pub mod attention;
pub mod backend;
pub mod backends;
pub mod gemm_baseline;
pub mod schema;
pub mod table;

pub use backend::AttentionBenchBackend;
pub mod build_info;
pub mod citations;
pub mod prefill;
pub mod prefill_model;
pub mod prefill_schema;
pub mod qualify;
pub mod report;
pub mod report_svg;
pub mod validate;
