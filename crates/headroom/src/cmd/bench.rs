//! `headroom bench ...`: benchmark subcommands (what each measures is its
//! one-line help below, shown by `headroom bench --help`).
//!
//! `bench attention` runs the prefill attention A/B of `headroom_bench::attention`
//! on one backend, prints a table (with the causal FLOP formula and, with
//! `--gemm-baseline`, the square f32 GEMM yardstick) and writes the
//! `headroom.bench.attention/1` JSON with `--json`.

use crate::global::GlobalArgs;
use crate::out;
use crate::shape_args::ShapeArgs;
use anyhow::Context;
use headroom_bench::attention::{self, AttentionBenchConfig};
use headroom_bench::backends::backend_for;
use headroom_bench::gemm_baseline::SquareGemm;
use headroom_bench::table;
use headroom_core::{BackendKind, Dtype, RouteRequest};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// One attention call, route against route: time per call and TFLOP/s per route and length
    /// on one backend (no model).
    Attention(AttentionArgs),
    /// The whole model through the engine: time to first token per prompt length, with
    /// decode tokens/s and a per-part time breakdown on request.
    Ttft(crate::cmd::bench_ttft::TtftArgs),
    /// The whole model's prefill TTFT per attention setting (arm) and prompt length, with the
    /// routes that ran (headroom.bench.prefill/1 evidence for qualification).
    Prefill(crate::cmd::bench_prefill::Args),
    /// Checks headroom.bench.prefill/1 files strictly (measures nothing); exit 1 listing every
    /// violation.
    Validate(crate::cmd::bench_validate::Args),
    /// A running `headroom serve` on this machine under load: TTFT / inter-token / end-to-end
    /// latency percentiles, requests/s and tokens/s.
    Serve(crate::cmd::bench_serve::Args),
}

#[derive(clap::Args, Debug)]
pub struct AttentionArgs {
    /// Backend: cpu | cuda.
    #[arg(long, default_value = "cpu")]
    pub backend: BackendKind,
    #[command(flatten)]
    pub shape: ShapeArgs,
    /// Storage dtype: f32 | f16 | bf16.
    #[arg(long, default_value = "bf16")]
    pub dtype: Dtype,
    /// Query lengths (comma-separated); kv_len = length + history.
    #[arg(long, value_delimiter = ',', default_value = "512,2048,4096")]
    pub lengths: Vec<usize>,
    /// Route arms (comma-separated): fused, composed, composed:N (N = query block, 0 = one block).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "composed:128,composed:512,fused"
    )]
    pub routes: Vec<RouteRequest>,
    /// Measured runs per arm (median and min reported).
    #[arg(long, alias = "iters", default_value_t = 5)]
    pub iterations: usize,
    /// Unmeasured runs per arm before measuring.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Seed of the random inputs (length i uses seed + i).
    #[arg(long, default_value_t = 0x4845_4144)]
    pub seed: u64,
    /// Also time a square f32 GEMM (edge N >= 1, default 2048) with the same gemm library and
    /// threads, once per round interleaved with the arms (the CPU yardstick).
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "2048")]
    pub gemm_baseline: Option<usize>,
    /// Write the headroom.bench.attention/1 JSON to PATH (checked writable before the run).
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
}

pub fn run(c: BenchCommand, g: &GlobalArgs) -> anyhow::Result<()> {
    match c {
        BenchCommand::Attention(a) => {
            crate::global::refuse_attention_flags(g, "bench attention")?;
            attention_cmd(a)
        }
        BenchCommand::Ttft(a) => crate::cmd::bench_ttft::run(a, g),
        BenchCommand::Prefill(a) => {
            crate::global::refuse_attention_flags(g, "bench prefill")?;
            crate::cmd::bench_prefill::run(a, g)
        }
        BenchCommand::Validate(a) => {
            crate::global::refuse_attention_flags(g, "bench validate")?;
            crate::cmd::bench_validate::run(a)
        }
        BenchCommand::Serve(a) => {
            crate::global::refuse_attention_flags(g, "bench serve")?;
            crate::cmd::bench_serve::run(a)
        }
    }
}

fn attention_cmd(a: AttentionArgs) -> anyhow::Result<()> {
    let cfg = AttentionBenchConfig {
        head_dim: a.shape.head_dim,
        q_heads: a.shape.q_heads,
        kv_heads: a.shape.kv_heads,
        dtype: a.dtype,
        lengths: a.lengths,
        history: a.shape.history,
        routes: a.routes,
        iterations: a.iterations,
        warmup: a.warmup,
        seed: a.seed,
    };
    if let Some(path) = &a.json {
        crate::output::check_output_path("--json", path, &[])?;
    }
    let available = headroom_hardware::available_memory_bytes();
    cfg.validate_with_memory(available)?;
    let mut square = match a.gemm_baseline {
        Some(n) => Some(SquareGemm::try_new(n, available).map_err(anyhow::Error::msg)?),
        None => None,
    };
    let hardware = headroom_hardware::detect(a.backend)?;
    let mut backend = backend_for(a.backend)?;
    tracing::info!(backend = backend.name(), "bench attention");
    let mut time_gemm = square.as_mut().map(|g| move || g.time_once());
    let (file, gemm_times) = attention::run_with_yardstick(
        &cfg,
        backend.as_mut(),
        hardware,
        time_gemm.as_mut().map(|f| f as attention::Yardstick<'_>),
    )?;
    let gemm = square.as_ref().map(|g| g.summary(&gemm_times));
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&file)? + "\n";
        crate::output::write_file_atomically(path, text.as_bytes())?;
        eprintln!("wrote {}", path.display());
    }
    out!("{}", table::render(&file, gemm.as_ref()))
}
