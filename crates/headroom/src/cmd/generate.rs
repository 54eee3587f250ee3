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
//! * `--json OUT`: one line per request (`index`, `ids`, `text`,
//!   `finish_reason`, `prompt_tokens`, `completion_tokens`, `ttft_ms`), then a
//!   summary line (throughput, the scheduler settings, the KV backend).
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

use super::logits::{attention_plan, available_memory_bytes, check_memory, ForwardArgs};
use crate::backend_select::{load_config, run_on_backend, LoadInfo, ModelJob, WeightsInit};
use crate::engine_args::EngineArgs;
use crate::global::GlobalArgs;
use crate::tp::{GroupInfo, GroupJob};
use anyhow::{bail, Context};
use headroom_core::ops::{Backend, SamplingParams};
use headroom_core::BackendKind;
use headroom_engine::{
    EngineConfig, EngineStats, FinishReason, GenerateRequest, RequestStream, StreamEvent, Usage,
};
use headroom_model::tokenizer::{StreamDecoder, TextCodec, Tokenizer};
use headroom_model::{AttentionPlan, Qwen35Model, StepModel, TpGroup};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Largest `--prompts` file read (bytes) and most requests in it.
const MAX_PROMPTS_BYTES: u64 = 256 << 20;
const MAX_PROMPTS: usize = 100_000;
/// Largest `--prompt-file` read (bytes): far beyond any context in tokens.
const MAX_PROMPT_FILE_BYTES: u64 = 64 << 20;

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
    /// Memory budget of the engine's KV, GDN state and attention transients, MiB
    /// (default: 90% of available memory on cpu; unbounded on cuda).
    #[arg(long, value_name = "MIB")]
    pub memory_budget_mib: Option<u64>,
    /// Most sequences running at once.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub max_running: usize,
    /// Most tokens of one sequence (default: the longest request, rounded up to 64).
    #[arg(long, value_name = "N")]
    pub max_context: Option<usize>,
}

/// One line of a `--prompts` file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptLine {
    prompt: Option<String>,
    ids: Option<Vec<u32>>,
    max_tokens: Option<usize>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<usize>,
    seed: Option<u64>,
}

/// One request's JSON line.
#[derive(Debug, Serialize)]
struct RequestLine<'a> {
    index: usize,
    ids: &'a [u32],
    text: String,
    finish_reason: Option<&'static str>,
    error: Option<&'a str>,
    prompt_tokens: usize,
    completion_tokens: usize,
    ttft_ms: f64,
}

pub fn run(a: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    check_sampling(a.temperature, a.top_p, "--")?;
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
            generation_eos(dir),
        ),
        None => {
            if cfg.vocab_size < 256 {
                bail!("the byte-level fallback tokenizer needs vocab_size >= 256");
            }
            (TextCodec::Bytes, Vec::new())
        }
    };
    eos.extend(&cfg.eos_token_ids);
    let mut requests = build_requests(&a, &codec, cfg.vocab_size)?;
    fit_context(&mut requests, &cfg)?;
    let settings = a.engine.scheduler(a.forward.chunk)?;
    let longest = requests
        .iter()
        .map(|r| r.prompt_ids.len() + r.max_tokens)
        .max()
        .unwrap_or(1);
    let max_context = a.max_context.unwrap_or(longest.div_ceil(64).max(1) * 64);
    let attention = if a.forward.tp.active() {
        crate::tp::plan_and_routes(g, a.forward.backend, &cfg, a.forward.tp.world())?.1
    } else {
        attention_plan(g, a.forward.backend, &cfg)?
    };
    let engine = EngineConfig {
        scheduler: settings,
        attention,
        kv_backend: a.engine.kv,
        memory_budget_bytes: a.memory_budget_mib.map(|m| m.saturating_mul(1 << 20)),
        max_running: a.max_running,
        max_context,
        max_waiting: requests.len().max(1024),
        eos_token_ids: eos,
        capture_logits: false,
    };
    let job = GenerateJob {
        requests,
        engine,
        codec,
        json: a.json.clone(),
        single: a.prompts.is_none(),
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
        source,
        &cfg,
        a.forward.weights_seed,
        a.forward.weights_init,
        job,
    )
}

fn check_sampling(temperature: f32, top_p: f32, what: &str) -> anyhow::Result<()> {
    if !(temperature.is_finite() && temperature >= 0.0) {
        bail!("{what}temperature must be a number >= 0 (got {temperature})");
    }
    if !(top_p > 0.0 && top_p <= 1.0) {
        bail!("{what}top-p must be in (0, 1] (got {top_p})");
    }
    Ok(())
}

fn sampling(a: &Args) -> SamplingParams {
    SamplingParams {
        temperature: a.temperature,
        top_p: a.top_p,
        top_k: a.top_k,
        seed: a.seed,
    }
}

fn encode(codec: &TextCodec, text: &str, vocab: usize, what: &str) -> anyhow::Result<Vec<u32>> {
    let ids = codec.encode(text)?;
    if ids.is_empty() {
        bail!("{what}: the prompt encodes to no tokens");
    }
    check_ids(&ids, vocab, what)?;
    Ok(ids)
}

fn check_ids(ids: &[u32], vocab: usize, what: &str) -> anyhow::Result<()> {
    if ids.is_empty() {
        bail!("{what}: no token ids");
    }
    if let Some(pos) = ids.iter().position(|&id| id as usize >= vocab) {
        bail!(
            "{what}: token id {} at position {pos} is out of range (vocab_size {vocab})",
            ids[pos]
        );
    }
    Ok(())
}

/// Refuses a prompt longer than the model's context (`max_position_embeddings`)
/// and clamps `max_tokens` to the room the prompt leaves, with a warning.
fn fit_context(
    requests: &mut [GenerateRequest],
    cfg: &headroom_model::ModelConfig,
) -> anyhow::Result<()> {
    for (i, r) in requests.iter_mut().enumerate() {
        let n = r.prompt_ids.len();
        cfg.check_sequence_length(n)
            .with_context(|| format!("prompt {i} ({n} tokens)"))?;
        let room = cfg.max_position_embeddings - n;
        if r.max_tokens > room {
            tracing::warn!(
                "--max-tokens {} clamped to {room}: prompt {i}'s {n} tokens leave {room} of the model's {} positions",
                r.max_tokens,
                cfg.max_position_embeddings
            );
            r.max_tokens = room;
        }
    }
    Ok(())
}

/// The requests the flags name: one prompt, or every line of `--prompts`.
fn build_requests(
    a: &Args,
    codec: &TextCodec,
    vocab: usize,
) -> anyhow::Result<Vec<GenerateRequest>> {
    let one = |ids| GenerateRequest {
        prompt_ids: ids,
        sampling: sampling(a),
        max_tokens: a.max_tokens,
        stop_token_ids: Vec::new(),
    };
    match (&a.prompt, &a.prompt_file, &a.prompts) {
        (Some(p), _, _) => Ok(vec![one(encode(codec, p, vocab, "--prompt")?)]),
        (None, Some(path), _) => {
            let text =
                crate::input_file::read_input_text("--prompt-file", path, MAX_PROMPT_FILE_BYTES)?;
            Ok(vec![one(encode(codec, &text, vocab, "--prompt-file")?)])
        }
        (None, None, Some(path)) => read_prompts(path, a, codec, vocab),
        _ => bail!("give --prompt TEXT, --prompt-file PATH or --prompts FILE"),
    }
}

fn read_prompts(
    path: &Path,
    a: &Args,
    codec: &TextCodec,
    vocab: usize,
) -> anyhow::Result<Vec<GenerateRequest>> {
    let bytes = crate::input_file::read_input_file("--prompts", path, MAX_PROMPTS_BYTES)?;
    let mut out = Vec::new();
    for (n, line) in bytes.as_slice().lines().enumerate() {
        let line = line.with_context(|| format!("reading line {} of {}", n + 1, path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        if out.len() == MAX_PROMPTS {
            bail!("more than {MAX_PROMPTS} requests in {}", path.display());
        }
        let what = format!("{} line {}", path.display(), n + 1);
        let p: PromptLine =
            serde_json::from_str(&line).with_context(|| format!("{what}: not a prompt line"))?;
        let ids = match (p.prompt, p.ids) {
            (Some(text), None) => encode(codec, &text, vocab, &what)?,
            (None, Some(ids)) => {
                check_ids(&ids, vocab, &what)?;
                ids
            }
            _ => bail!("{what}: give exactly one of \"prompt\" or \"ids\""),
        };
        let base = sampling(a);
        let s = SamplingParams {
            temperature: p.temperature.unwrap_or(base.temperature),
            top_p: p.top_p.unwrap_or(base.top_p),
            top_k: p.top_k.unwrap_or(base.top_k),
            seed: p.seed.unwrap_or(base.seed),
        };
        check_sampling(s.temperature, s.top_p, &format!("{what}: "))?;
        out.push(GenerateRequest {
            prompt_ids: ids,
            sampling: s,
            max_tokens: p.max_tokens.unwrap_or(a.max_tokens),
            stop_token_ids: Vec::new(),
        });
    }
    if out.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(out)
}

/// End-of-sequence ids from `generation_config.json`, when the folder has one.
fn generation_eos(dir: &Path) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        tracing::warn!("generation_config.json is not valid JSON; ignoring it");
        return Vec::new();
    };
    let id = |x: &serde_json::Value| x.as_u64().and_then(|x| u32::try_from(x).ok());
    let ids = match &v["eos_token_id"] {
        serde_json::Value::Null => return Vec::new(),
        serde_json::Value::Array(a) => a.iter().map(id).collect::<Option<Vec<u32>>>(),
        x => id(x).map(|x| vec![x]),
    };
    ids.unwrap_or_else(|| {
        tracing::warn!(
            "generation_config.json: eos_token_id {} is not a token id or a list of them; ignoring it",
            v["eos_token_id"]
        );
        Vec::new()
    })
}

/// Runs every request through an engine on the built model.
struct GenerateJob {
    requests: Vec<GenerateRequest>,
    engine: EngineConfig,
    codec: TextCodec,
    json: Option<PathBuf>,
    single: bool,
}

/// What one request produced.
#[derive(Default)]
struct Outcome {
    ids: Vec<u32>,
    reason: Option<FinishReason>,
    usage: Option<Usage>,
    error: Option<String>,
}

/// What loading took, on one model or a group.
struct RunInfo {
    backend: BackendKind,
    load_seconds: f64,
    /// Backend bytes each rank holds after loading (one entry without a group).
    weight_bytes: Vec<usize>,
}

impl ModelJob for GenerateJob {
    type Output = ();

    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<()> {
        let info = RunInfo {
            backend: info.backend,
            load_seconds: info.load_seconds,
            weight_bytes: vec![info.weight_bytes],
        };
        self.run_engine(model, &info)
    }
}

impl GroupJob for GenerateJob {
    type Output = ();

    fn run<B: Backend + 'static>(self, group: TpGroup<B>, info: &GroupInfo) -> anyhow::Result<()> {
        let info = RunInfo {
            backend: info.backend,
            load_seconds: info.load_seconds,
            weight_bytes: info.weight_bytes.clone(),
        };
        self.run_engine(group, &info)
    }
}

impl GenerateJob {
    /// Runs every request through an engine on `model` (one model or a group).
    fn run_engine<B: Backend + 'static, M: StepModel<B> + 'static>(
        self,
        model: M,
        info: &RunInfo,
    ) -> anyhow::Result<()> {
        let mut engine = self.engine.clone();
        let world = info.weight_bytes.len().max(1) as u64;
        if engine.memory_budget_bytes.is_none() && info.backend == BackendKind::Cpu {
            engine.memory_budget_bytes = available_memory_bytes().map(|b| b / 10 * 9 / world);
        }
        let plan_text = match &engine.attention {
            AttentionPlan::Uniform(r) => r.to_string(),
            AttentionPlan::PerLayer(l) => format!("{l:?}"),
        };
        let handle = headroom_engine::spawn(model, engine).context("starting the engine")?;
        let st = handle.stats();
        eprintln!(
            "engine: {} on {}{}; {}; attention {plan_text}; memory budget {}{}",
            st.settings,
            info.backend,
            if world > 1 {
                format!(" x{world} (tensor parallel)")
            } else {
                String::new()
            },
            st.kv,
            st.memory_budget_bytes
                .map_or("unbounded".to_string(), |b| format!(
                    "{:.1} MiB",
                    b as f64 / 1048576.0
                )),
            if world > 1 { " per rank" } else { "" }
        );
        let started = Instant::now();
        let mut streams: Vec<Option<RequestStream>> = Vec::new();
        let mut outcomes: Vec<Outcome> = Vec::new();
        for r in &self.requests {
            match handle.submit(r.clone()) {
                Ok(s) => {
                    streams.push(Some(s));
                    outcomes.push(Outcome::default());
                }
                Err(e) if self.single => bail!("{e}"),
                Err(e) => {
                    streams.push(None);
                    outcomes.push(Outcome {
                        error: Some(e.to_string()),
                        ..Outcome::default()
                    });
                }
            }
        }
        if self.single {
            if let Some(s) = streams[0].as_mut() {
                stream_one(s, &self.codec, &mut outcomes[0])?;
            }
        } else {
            collect_all(&mut streams, &mut outcomes, &self.codec)?;
        }
        let wall = started.elapsed().as_secs_f64();
        let stats = handle.stats();
        handle.shutdown_and_wait();
        if self.single {
            report_single(&self.requests[0], &outcomes[0], wall)?;
        }
        let summary = summary(&outcomes, wall, &stats, info);
        eprintln!("{}", serde_json::to_string(&summary)?);
        if let Some(path) = &self.json {
            write_json(path, &outcomes, &self.codec, &summary)?;
        }
        Ok(())
    }
}

/// Streams one request's text to stdout as tokens arrive.
fn stream_one(s: &mut RequestStream, codec: &TextCodec, o: &mut Outcome) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut text = StreamDecoder::new();
    while let Some(e) = s.blocking_next() {
        if let StreamEvent::Token(t) = &e {
            let piece = crate::output::escape_generated(&text.push(codec, *t)?);
            write!(stdout, "{piece}")
                .and_then(|()| stdout.flush())
                .context("writing to stdout")?;
        }
        if apply(o, e) {
            break;
        }
    }
    let tail = crate::output::escape_generated(&text.finish(codec)?);
    writeln!(stdout, "{tail}")
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    if let Some(e) = &o.error {
        bail!("{e}");
    }
    Ok(())
}

/// Applies an event; true when it ended the request.
fn apply(o: &mut Outcome, e: StreamEvent) -> bool {
    match e {
        StreamEvent::Token(t) => {
            o.ids.push(t);
            false
        }
        StreamEvent::Finished { reason, usage, .. } => {
            o.reason = Some(reason);
            o.usage = Some(usage);
            true
        }
        StreamEvent::Error(e) => {
            o.error = Some(e);
            true
        }
    }
}

/// Polls every stream until all requests ended; prints each text as it completes.
fn collect_all(
    streams: &mut [Option<RequestStream>],
    outcomes: &mut [Outcome],
    codec: &TextCodec,
) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    loop {
        let mut progressed = false;
        let mut open = 0;
        for (i, slot) in streams.iter_mut().enumerate() {
            let Some(s) = slot.as_mut() else { continue };
            open += 1;
            while let Some(e) = s.try_next() {
                progressed = true;
                if apply(&mut outcomes[i], e) {
                    let o = &outcomes[i];
                    let tag = o.reason.map_or("error", |r| r.as_str());
                    let text = crate::output::escape_generated(&codec.decode(&o.ids)?);
                    writeln!(stdout, "[{i}] ({tag}) {text}").context("writing to stdout")?;
                    *slot = None;
                    break;
                }
            }
        }
        if open == 0 {
            return Ok(());
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn report_single(r: &GenerateRequest, o: &Outcome, wall: f64) -> anyhow::Result<()> {
    let u = o.usage.context("the request ended without usage")?;
    let ttft = u.ttft_ms / 1e3;
    let decode = (wall - ttft).max(1e-9);
    eprintln!(
        "prompt {} tokens, prefill {:.3} s ({:.1} tokens/s); generated {} tokens in {:.3} s ({:.1} tokens/s)",
        r.prompt_ids.len(),
        ttft,
        r.prompt_ids.len() as f64 / ttft.max(1e-9),
        u.completion_tokens,
        decode,
        u.completion_tokens.saturating_sub(1) as f64 / decode
    );
    Ok(())
}

fn summary(outcomes: &[Outcome], wall: f64, st: &EngineStats, info: &RunInfo) -> serde_json::Value {
    let prompt: usize = outcomes
        .iter()
        .filter_map(|o| o.usage)
        .map(|u| u.prompt_tokens)
        .sum();
    let generated: usize = outcomes
        .iter()
        .filter_map(|o| o.usage)
        .map(|u| u.completion_tokens)
        .sum();
    serde_json::json!({"summary": {
        "requests": outcomes.len(),
        "completed": outcomes.iter().filter(|o| o.reason.is_some()).count(),
        "errors": outcomes.iter().filter(|o| o.error.is_some()).count(),
        "prompt_tokens": prompt,
        "completion_tokens": generated,
        "wall_s": wall,
        "generated_tokens_per_s": generated as f64 / wall.max(1e-9),
        "total_tokens_per_s": (prompt + generated) as f64 / wall.max(1e-9),
        "backend": info.backend,
        "load_seconds": info.load_seconds,
        "tensor_parallel": info.weight_bytes.len(),
        "weight_bytes": info.weight_bytes.iter().sum::<usize>(),
        "weight_bytes_per_rank": info.weight_bytes,
        "peak_device_bytes_per_rank": st.device_memory.iter().map(|m| m.peak_bytes).collect::<Vec<_>>(),
        "scheduler": st.settings,
        "kv": st.kv,
        "memory_budget_bytes": st.memory_budget_bytes,
        "steps": st.steps,
        "refused": st.refused,
        "cancelled": st.cancelled,
    }})
}

fn write_json(
    path: &Path,
    outcomes: &[Outcome],
    codec: &TextCodec,
    summary: &serde_json::Value,
) -> anyhow::Result<()> {
    let mut out = String::new();
    for (index, o) in outcomes.iter().enumerate() {
        let u = o.usage.unwrap_or(Usage {
            prompt_tokens: 0,
            completion_tokens: 0,
            ttft_ms: 0.0,
        });
        let line = RequestLine {
            index,
            ids: &o.ids,
            text: codec.decode(&o.ids)?,
            finish_reason: o.reason.map(|r| r.as_str()),
            error: o.error.as_deref(),
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            ttft_ms: u.ttft_ms,
        };
        out.push_str(&serde_json::to_string(&line)?);
        out.push('\n');
    }
    out.push_str(&serde_json::to_string(summary)?);
    out.push('\n');
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}
