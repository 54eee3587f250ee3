//! `headroom generate`: text generation through the engine
//! (`headroom_engine`: continuous batching, chunked prefill, admission by
//! memory) on the CPU or CUDA backend.
//!
//! * One prompt (`--prompt` / `--prompt-file`): its text streams to stdout
//!   token by token. Greedy by default; `--temperature T` (> 0) samples with
//!   top-k / top-p from the seeded counter-based stream (same seed, same text).
//! * Many prompts (`--prompts FILE`, JSON lines `{"prompt": "..."}` or
//!   `{"ids": [...]}`, each optionally with `max_tokens`, `temperature`,
//!   `top_p`, `top_k`, `seed`): all are submitted at once and run
//!   concurrently; each finished text is printed as it completes.
//! * On stderr: one line of what ran (backend, model, attention per layer
//!   kind, KV cache, scheduler, memory budget) and one line of timings, the
//!   warm-up (the kernels' first use: compilation on a first run) apart from
//!   the prefill.
//! * `--json OUT`: one line per request (`index`, `ids`, `text`,
//!   `finish_reason`, `prompt_tokens`, `completion_tokens`, `ttft_ms`), then a
//!   summary line (throughput, the scheduler settings, the KV backend).
//!
//! Files: `prompts` (the requests), `job` (the engine run), `report` (the
//! lines and the JSON).
//!
//! Text: a checkpoint's `tokenizer.json`; a synthetic model (no tokenizer)
//! uses the byte-level fallback of `headroom_model::tokenizer` (one id per
//! UTF-8 byte; ids ≥ 256 print as `<|ID|>`): a synthetic model's weights are
//! random, so its text is gibberish. Control characters in the generated text
//! (other than newline and tab) are printed escaped (`\u{1b}`), never raw.
//!
//! The prompt must fit the model's context (`max_position_embeddings`);
//! `--max-tokens` beyond the room left is clamped, with a warning.
//!
//! `--tensor-parallel N` (or `HEADROOM_TP`): the engine runs a
//! `headroom_model::TpGroup` of N ranks (threads on cpu, GPUs on cuda); its
//! memory model and `--memory-budget-mib` are per rank (on cpu, where the
//! ranks share the host, the default budget is 90 % of the available memory
//! divided by N). The summary reports each rank's weight bytes.

mod job;
mod prompts;
mod report;

use super::logits::{check_memory, ForwardArgs};
use crate::attention_setup::attention_plan_and_why;
use crate::backend_select::{load_config, run_on_backend, WeightsInit};
use crate::capacity_args::{CapacityArgs, AUTO_RUNNING_CAP};
use crate::engine_args::EngineArgs;
use crate::global::GlobalArgs;
use anyhow::bail;
use headroom_core::BackendKind;
use headroom_engine::config::ContextFit;
use headroom_engine::EngineConfig;
use headroom_model::tokenizer::{TextCodec, Tokenizer};
use job::GenerateJob;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub forward: ForwardArgs,
    /// The prompt text.
    #[arg(long, required_unless_present_any = ["prompt_file", "prompts"], conflicts_with_all = ["prompt_file", "prompts"])]
    pub prompt: Option<String>,
    /// Read the prompt from a UTF-8 text file instead (e.g. a long prompt for a prefill measurement).
    #[arg(long, value_name = "PATH", conflicts_with = "prompts")]
    pub prompt_file: Option<PathBuf>,
    /// Many requests, run concurrently: JSON lines `{"prompt": "..."}` or `{"ids": [...]}`,
    /// optionally with max_tokens, temperature, top_p, top_k, seed.
    #[arg(long, value_name = "FILE.jsonl")]
    pub prompts: Option<PathBuf>,
    /// Write one JSON line per request and a summary line to this file.
    #[arg(long, value_name = "OUT.jsonl")]
    pub json: Option<PathBuf>,
    /// Tokens to generate at most (stops earlier at an end-of-sequence token).
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_tokens: usize,
    /// Sampling temperature; 0 = greedy.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "T",
        allow_hyphen_values = true
    )]
    pub temperature: f32,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches P.
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "P",
        allow_hyphen_values = true
    )]
    pub top_p: f32,
    /// Keep only the K most likely tokens; 0 keeps all.
    #[arg(long, default_value_t = 0, value_name = "K")]
    pub top_k: usize,
    /// Sampling seed.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub capacity: CapacityArgs,
    /// Most tokens of one sequence (default: the longest request, rounded up to 64).
    #[arg(long, value_name = "N")]
    pub max_context: Option<usize>,
}

pub fn run(a: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    crate::arg_checks::at_least_one("--max-tokens", a.max_tokens)?;
    if let Some(json) = &a.json {
        let inputs: Vec<&std::path::Path> = [&a.prompts, &a.prompt_file, &a.forward.source.model]
            .into_iter()
            .flatten()
            .map(|p| p.as_path())
            .collect();
        crate::output::check_output_path("--json", json, &inputs)?;
    }
    prompts::check_sampling(a.temperature, a.top_p, "--")?;
    let capacity = a.capacity.capacity()?;
    if a.forward.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    let source = &a.forward.source;
    let cfg = load_config(source)?;
    if a.forward.backend == BackendKind::Cpu
        || source.model.is_some()
        || a.forward.weights_init == Some(WeightsInit::Host)
    {
        check_memory(&cfg, "the model")?;
    }
    let (codec, mut eos) = match &source.model {
        Some(dir) => (
            TextCodec::Hf(Box::new(Tokenizer::from_dir(dir)?)),
            prompts::generation_eos(dir),
        ),
        None => {
            if cfg.vocab_size < 256 {
                bail!("the byte-level fallback tokenizer needs vocab_size >= 256");
            }
            // The family's special tokens, not its EOS: a benchmark's random
            // weights keep generating to max_tokens.
            (headroom_model::synthetic::codec_for(&cfg), Vec::new())
        }
    };
    eos.extend(&cfg.eos_token_ids);
    let mut requests = prompts::build_requests(&a, &codec, cfg.vocab_size)?;
    prompts::fit_context(&mut requests, &cfg)?;
    let settings = a.engine.scheduler(a.forward.chunk)?;
    let prefix_cache = a.engine.prefix_cache()?;
    let longest = requests
        .iter()
        .map(|r| r.prompt_ids.len() + r.max_tokens)
        .max()
        .unwrap_or(1);
    let max_context = match a.max_context {
        Some(_) => super::serve::serve_max_context(a.max_context, cfg.max_position_embeddings)?,
        None => longest.div_ceil(64).max(1) * 64,
    };
    let (attention, why) = if a.forward.tp.active() {
        let plan = crate::tp::plan_and_routes(g, a.forward.backend, &cfg, a.forward.tp.world())?.1;
        (plan, None)
    } else {
        let (plan, why) = attention_plan_and_why(g, a.forward.backend, &cfg)?;
        (plan, Some(why))
    };
    let engine = EngineConfig {
        scheduler: settings,
        attention,
        kv_backend: a.engine.kv,
        memory_budget_bytes: capacity.memory_budget_bytes,
        memory_fraction: capacity.memory_fraction,
        max_running: capacity.max_running_or(requests.len().clamp(1, AUTO_RUNNING_CAP)),
        max_running_from_memory: capacity.max_running_from_memory(),
        kv_pool_blocks: None,
        max_context,
        // The longest request's context (or --max-context): never lowered.
        context_fit: ContextFit::Exact,
        max_waiting: requests.len().max(1024),
        eos_token_ids: eos,
        capture_logits: false,
        prefix_cache,
        step_overlap: a.engine.step_overlap,
        cuda_graphs: a.engine.cuda_graphs(),
    };
    let job = GenerateJob {
        model: source.label(),
        attention: crate::describe::with_why(
            crate::describe::attention(&engine.attention, &cfg.layer_kinds()),
            why,
        ),
        requests,
        engine,
        codec,
        json: a.json.clone(),
        single: a.prompts.is_none(),
        batch_invariant: a.engine.batch_invariant,
    };
    if a.forward.tp.active() {
        return crate::tp::run_on_group(
            a.forward.backend,
            a.forward.tp.world(),
            source,
            &cfg,
            a.forward.weights_seed,
            a.forward.weights_init,
            job,
        );
    }
    run_on_backend(
        a.forward.backend,
        a.engine.backend(),
        source,
        &cfg,
        a.forward.weights_seed,
        a.forward.weights_init,
        job,
    )
}
