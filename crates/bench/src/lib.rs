//! Benchmarks with JSON evidence.
//!
//! * [`backend::AttentionBenchBackend`]: what a backend offers the attention
//!   bench; [`backends::backend_for`] picks the CPU or CUDA one.
//! * [`attention`]: the backend-generic A/B runner over lengths and routes,
//!   writing [`schema::AttentionBenchFile`] (`headroom.bench.attention/1`).
//! * [`gemm_baseline`]: the square f32 GEMM the CPU bars are measured against.
//! * [`prefill`]: whole-model prefill per attention setting (arm), writing
//!   [`prefill_schema::PrefillBenchFile`] (`headroom.bench.prefill/1`) with the
//!   routes the attention calls reported ([`prefill_reports`]);
//!   [`prefill_engine`] drives the engine's scheduler (what the CLI runs),
//!   [`prefill_model`] the model's one-pass prefill.
//! * [`validate`]: strict checks of prefill files (every violation listed).
//! * [`qualify`]: candidates, leaders, the decision rule and the written entry;
//!   [`report`], [`report_svg`] and [`citations`] make its report.
//! * [`build_info`]: the build identity every evidence file records.
//! * [`serve_load`]: the load generator of `headroom bench serve` (latency
//!   percentiles, throughput over the tokens that flowed, requests cut by the
//!   time limit counted apart); [`serve_sweep`] runs it over a list of
//!   concurrency levels (`headroom.bench.serve/3`, throughput plot);
//!   [`serve_pool`] samples the server's pool gauges over each run and reads
//!   its preemptions; [`serve_gpu`] its GPU's clock, power and energy (joules
//!   per token); [`serve_turns`] makes multi-turn conversations.

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
pub mod prefill_engine;
pub mod prefill_model;
pub mod prefill_reports;
pub mod prefill_schema;
pub mod prefill_target;
mod prom_text;
pub mod qualify;
pub mod qualify_output;
pub mod report;
pub mod report_svg;
pub mod run_counter;
pub mod serve_gpu;
pub mod serve_load;
pub mod serve_outcome;
pub mod serve_pool;
pub mod serve_sweep;
pub mod serve_turns;
pub mod serve_workload;

pub mod validate;
