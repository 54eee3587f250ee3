//! `headroom serve`: the OpenAI-compatible HTTP server (`headroom_server`)
//! on the engine (`headroom_engine`), for `--synthetic NAME` or `--model DIR`
//! on `--backend cpu|cuda`. Prints `listening on http://ADDR` once bound;
//! SIGINT/SIGTERM stop accepting, let in-flight requests finish for
//! `--shutdown-grace-s`, cancel the rest and exit 0.
//!
//! Before listening, the engine is warmed up (`headroom_engine::warmup`: a
//! full prefill step and decode steps at several batch sizes, then
//! forgotten) and a line `warm-up: N requests, M steps, X ms` printed; a
//! failed warm-up exits 1 naming it. `--warmup auto` (the default) runs it on
//! a GPU backend only: the CPU loads nothing on first use.
//!
//! `--tensor-parallel N` (or `HEADROOM_TP`): the engine runs a
//! `headroom_model::TpGroup` of N ranks; `--memory-budget-mib` is per rank
//! (the engine's memory model counts one rank's share of the KV and GDN
//! state); each rank's weight bytes are printed at start.
//!
//! The engine sizes its paged KV pool and state slots from memory
//! (`headroom_engine::pool`): `--memory-fraction` of the device on CUDA,
//! `--memory-budget-mib` (default 90 % of the available memory) on the CPU.
//! The start-up line gives the pool (blocks, tokens, GiB), the state slots
//! and how many sequences fit at full context; settings that cannot fit
//! exit 1 with one line giving the numbers. Without `--max-context` the
//! model's context is a ceiling (`ContextFit::AtMost`): where it does not
//! fit, the engine runs the largest context that does, with a warning, and
//! the start-up line says `lowered from N to fit`; a `--max-context` given
//! is exact (too long: exit 1 naming the largest that fits).

use crate::attention_setup::attention_plan_and_why;
use crate::backend_select::{load_config, run_on_backend, LoadInfo, ModelJob, WeightsInit};
use crate::capacity_args::{CapacityArgs, AUTO_RUNNING_CAP};
use crate::engine_args::EngineArgs;
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use crate::tp::{GroupInfo, GroupJob, TpArgs};
use crate::warmup_mode::WarmupMode;
use anyhow::{bail, Context};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_engine::config::ContextFit;
use headroom_engine::EngineConfig;
use headroom_model::tokenizer::{TextCodec, Tokenizer};
use headroom_model::{Qwen35Model, StepModel, TpGroup};
use headroom_server::net::ConnLimits;
use headroom_server::{AppState, ChatTemplate, ServerConfig};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub source: ModelSource,
    /// Compute backend.
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda")]
    pub backend: BackendKind,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: any free port; the bound address is printed).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// The model id clients name (default: the synthetic name or the folder's name).
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    /// Seed of a synthetic model's weights.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub weights_seed: u64,
    /// Where a synthetic model's weights are drawn (default: host on cpu, device on cuda).
    #[arg(long, value_name = "host|device")]
    pub weights_init: Option<WeightsInit>,
    /// Most tokens (prompt + generated) of one request (default: the model's
    /// `max_position_embeddings`, lowered to the largest context that fits
    /// memory, with a warning; never above it). Given, it is exact: a
    /// context that does not fit exits 1 naming the largest that does.
    #[arg(long, value_name = "N")]
    pub max_context: Option<usize>,
    #[command(flatten)]
    pub capacity: CapacityArgs,
    /// Most requests waiting for admission; beyond it requests are answered 429.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_waiting: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// `max_tokens` of a request that gives none (cut to the context left).
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub default_max_tokens: usize,
    /// Largest request body, bytes (413 beyond).
    #[arg(long, default_value_t = 4 << 20, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// Seconds in-flight requests may run after SIGINT/SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS", value_parser = crate::arg_checks::seconds)]
    pub shutdown_grace_s: f64,
    /// `enable_thinking` of chat requests that give none (default: the chat template's own;
    /// false for synthetic models).
    #[arg(long, value_name = "BOOL")]
    pub enable_thinking: Option<bool>,
    /// The start-up warm-up: a full prefill step and decode steps at 1, 8
    /// and 64 rows before listening, so the first request does not pay the
    /// kernels' first use. `auto`: on a GPU backend, off on the CPU (which
    /// loads nothing on first use).
    #[arg(long, value_enum, value_name = "auto|on|off", default_value_t = WarmupMode::Auto)]
    pub warmup: WarmupMode,
    #[command(flatten)]
    pub tp: TpArgs,
    #[command(flatten)]
    pub limits: ServeLimitArgs,
}

/// The server's connection limits (`headroom_server::net::ConnLimits`).
#[derive(clap::Args, Debug)]
pub struct ServeLimitArgs {
    /// Seconds a client may take from a request's first byte to the end of its header block
    /// (slower: the connection is closed).
    #[arg(
        long,
        default_value_t = 10.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub header_timeout_s: f64,
    /// Seconds a client may take to send a request body (slower: 408).
    #[arg(
        long,
        default_value_t = 30.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub body_timeout_s: f64,
    /// Seconds a response write may make no progress (a client that stopped reading);
    /// past it the connection is closed and its request cancelled.
    #[arg(
        long,
        default_value_t = 30.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub write_timeout_s: f64,
    /// Seconds a connection may stay idle (no request in flight, no byte received) before it
    /// is closed.
    #[arg(
        long,
        default_value_t = 60.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub keep_alive_s: f64,
    /// Most connections open at once (beyond it a connection is answered 503 and closed).
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_connections: usize,
    /// Require `Authorization: Bearer KEY` on every `/v1/*` route (401 otherwise).
    #[arg(
        long,
        env = "HEADROOM_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub api_key: Option<String>,
    /// With --api-key, `/health` and `/metrics` need the key too.
    #[arg(long)]
    pub protect_probes: bool,
}

impl ServeLimitArgs {
    /// The checked limits.
    pub fn limits(&self) -> anyhow::Result<ConnLimits> {
        use headroom_server::net::limits::seconds;
        if self.max_connections == 0 {
            bail!("--max-connections must be at least 1");
        }
        Ok(ConnLimits {
            header_timeout: seconds("--header-timeout-s", self.header_timeout_s)
                .map_err(anyhow::Error::msg)?,
            body_timeout: seconds("--body-timeout-s", self.body_timeout_s)
                .map_err(anyhow::Error::msg)?,
            write_timeout: seconds("--write-timeout-s", self.write_timeout_s)
                .map_err(anyhow::Error::msg)?,
            keep_alive_timeout: seconds("--keep-alive-s", self.keep_alive_s)
                .map_err(anyhow::Error::msg)?,
            max_connections: self.max_connections,
        })
    }
}

pub fn run(a: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    if a.max_context == Some(0) || a.default_max_tokens == 0 {
        bail!("--max-context and --default-max-tokens must be at least 1");
    }
    let capacity = a.capacity.capacity()?;
    // A request always waits in the queue before it runs, and every request has a body:
    // 0 would refuse every request.
    crate::arg_checks::at_least_one("--max-waiting", a.max_waiting)?;
    crate::arg_checks::at_least_one("--max-body-bytes", a.max_body_bytes)?;
    let Ok(grace) = Duration::try_from_secs_f64(a.shutdown_grace_s) else {
        bail!(
            "--shutdown-grace-s must be a number of seconds >= 0 (got {:?})",
            a.shutdown_grace_s
        );
    };
    crate::arg_checks::check_host(&a.host, a.port)?;
    let limits = a.limits.limits()?;
    let cfg = load_config(&a.source)?;
    let max_context = serve_max_context(a.max_context, cfg.max_position_embeddings)?;
    let (codec, template, mut eos, stop_ids) = match &a.source.model {
        Some(dir) => text_side(dir)?,
        None => {
            if cfg.vocab_size < 256 {
                bail!("the byte-level fallback tokenizer needs vocab_size >= 256");
            }
            let t = headroom_model::synthetic::text_for(&cfg);
            (t.codec, ChatTemplate::qwen_shaped(), t.eos, t.stop_ids)
        }
    };
    eos.extend(&cfg.eos_token_ids);
    let scheduler = a.engine.scheduler(None)?;
    let prefix_cache = a.engine.prefix_cache()?;
    let (attention, why) = if a.tp.active() {
        (
            crate::tp::plan_and_routes(g, a.backend, &cfg, a.tp.world())?.1,
            None,
        )
    } else {
        let (plan, why) = attention_plan_and_why(g, a.backend, &cfg)?;
        (plan, Some(why))
    };
    let engine = EngineConfig {
        scheduler,
        attention,
        kv_backend: a.engine.kv,
        memory_budget_bytes: capacity.memory_budget_bytes,
        memory_fraction: capacity.memory_fraction,
        max_running: capacity.max_running_or(AUTO_RUNNING_CAP),
        max_running_from_memory: capacity.max_running_from_memory(),
        kv_pool_blocks: None,
        max_context,
        // The model's own context is a default, not a choice: lowered to fit.
        context_fit: if a.max_context.is_some() {
            ContextFit::Exact
        } else {
            ContextFit::AtMost
        },
        max_waiting: a.max_waiting,
        eos_token_ids: eos,
        capture_logits: false,
        prefix_cache,
        step_overlap: a.engine.step_overlap,
        cuda_graphs: a.engine.cuda_graphs(),
    };
    let name = a
        .served_model_name
        .clone()
        .unwrap_or_else(|| default_name(&a.source));
    let mut server = ServerConfig::new(&name, cfg.vocab_size);
    server.default_max_tokens = a.default_max_tokens;
    server.body_limit_bytes = a.max_body_bytes;
    server.stop_token_ids = stop_ids;
    server.limits = limits;
    if a.limits.api_key.as_deref() == Some("") {
        bail!("--api-key (or HEADROOM_API_KEY) must not be empty");
    }
    server.api_key = a.limits.api_key.clone().map(headroom_server::state::ApiKey);
    server.protect_probes = a.limits.protect_probes;
    if let Some(w) = headroom_server::auth::exposure_warning(&a.host, server.api_key.is_some()) {
        eprintln!("{w}");
    }
    // Synthetic weights have no reasoning to separate: their chat output is content
    // unless the flag or the request turns thinking on.
    server.enable_thinking = a
        .enable_thinking
        .or(a.source.model.is_none().then_some(false));
    let job = ServeJob {
        model: a.source.label(),
        attention: crate::describe::with_why(
            crate::describe::attention(&engine.attention, &cfg.layer_kinds()),
            why,
        ),
        engine,
        server,
        codec,
        template,
        host: a.host.clone(),
        port: a.port,
        grace,
        warmup: a.warmup,
        batch_invariant: a.engine.batch_invariant,
    };
    if a.tp.active() {
        return crate::tp::run_on_group(
            a.backend,
            a.tp.world(),
            &a.source,
            &cfg,
            a.weights_seed,
            a.weights_init,
            job,
        );
    }
    run_on_backend(
        a.backend,
        a.engine.backend(),
        &a.source,
        &cfg,
        a.weights_seed,
        a.weights_init,
        job,
    )
}

/// A checkpoint's tokenizer, chat template, generation EOS ids and the
/// chat end-of-turn id (`<|im_end|>`) when the vocabulary has it.
fn text_side(dir: &Path) -> anyhow::Result<(TextCodec, ChatTemplate, Vec<u32>, Vec<u32>)> {
    let tok = Tokenizer::from_dir(dir)?;
    let stop_ids = tok.token_id("<|im_end|>").into_iter().collect();
    let template = match ChatTemplate::from_dir(dir)? {
        Some(t) => t,
        None => {
            tracing::warn!(
                "{} has no chat template; using the plain one",
                dir.display()
            );
            ChatTemplate::plain()
        }
    };
    Ok((
        TextCodec::Hf(Box::new(tok)),
        template,
        generation_eos(dir),
        stop_ids,
    ))
}

/// End-of-sequence ids from `generation_config.json`, when the folder has one.
fn generation_eos(dir: &Path) -> Vec<u32> {
    let Some(text) = crate::model_source::read_generation_config(dir) else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        tracing::warn!("generation_config.json is not valid JSON; ignoring it");
        return Vec::new();
    };
    match &v["eos_token_id"] {
        serde_json::Value::Number(n) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        serde_json::Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_u64())
            .map(|x| x as u32)
            .collect(),
        _ => Vec::new(),
    }
}

fn default_name(source: &ModelSource) -> String {
    match (&source.synthetic, &source.model) {
        (Some(n), _) => n.clone(),
        (None, Some(dir)) => dir
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
        _ => "model".into(),
    }
}

struct ServeJob {
    /// The model and its layers' attention, in words (for the start-up line).
    model: String,
    attention: String,
    engine: EngineConfig,
    server: ServerConfig,
    codec: TextCodec,
    template: ChatTemplate,
    host: String,
    port: u16,
    grace: Duration,
    /// Whether the engine's warm-up runs before listening.
    warmup: WarmupMode,
    /// `--batch-invariant` (named on the start-up line when on).
    batch_invariant: bool,
}

impl ModelJob for ServeJob {
    type Output = ();

    fn run<B: Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<()> {
        self.serve(model, info.backend, String::new(), 1)
    }
}

impl GroupJob for ServeJob {
    type Output = ();

    fn run<B: Backend + 'static>(self, group: TpGroup<B>, info: &GroupInfo) -> anyhow::Result<()> {
        let ranks = format!(
            " x{} (tensor parallel, weights per rank {})",
            info.world,
            crate::tp::size_list(&info.weight_bytes)
        );
        self.serve(group, info.backend, ranks, info.world)
    }
}

impl ServeJob {
    /// Serves until a signal, the engine on `model` (one model or a group).
    fn serve<B: Backend + 'static, M: StepModel<B> + 'static>(
        self,
        model: M,
        backend: BackendKind,
        ranks: String,
        world: usize,
    ) -> anyhow::Result<()> {
        let mut engine = self.engine;
        if engine.memory_budget_bytes.is_none() && backend == BackendKind::Cpu {
            engine.memory_budget_bytes = crate::cmd::logits::available_memory_bytes()
                .map(|b| b / 10 * 9 / world.max(1) as u64);
        }
        let handle = headroom_engine::spawn(model, engine).context("starting the engine")?;
        let st = handle.stats();
        eprintln!(
            "serve on {backend}{ranks}: {}; {}; {}; scheduler {}; up to {} running, \
             context {} tokens; {}; {}{}{}{}{}",
            self.model,
            self.attention,
            crate::describe::kv(&st.kv),
            st.settings,
            st.pool.slots,
            handle.max_context(),
            crate::describe::budget(st.memory_budget_bytes),
            st.pool,
            if self.batch_invariant {
                "; batch-invariant"
            } else {
                ""
            },
            if st.step_overlap.on {
                "; step overlap on"
            } else {
                ""
            },
            if st.cuda_graphs.on {
                "; CUDA graphs on"
            } else {
                ""
            },
            st.step_activations
                .map(|c| format!(
                    "; step activations {} bytes a row (measured {})",
                    c.applied_bytes_per_row, c.measured_bytes_per_row
                ))
                .unwrap_or_default(),
        );
        if self.warmup.runs_on(backend) {
            match headroom_engine::warmup::warm_up(&handle) {
                // Printed like the start-up line above (the default log filter is `warn`).
                Ok(report) => eprintln!("{report}"),
                Err(e) => {
                    handle.shutdown_and_wait();
                    return Err(e).context("the start-up warm-up failed (--warmup off skips it)");
                }
            }
        }
        let name = self.server.served_model_name.clone();
        let engine = handle.clone();
        let mut state = AppState::new(Arc::new(handle), self.codec, self.template, self.server);
        if backend == BackendKind::Cuda && world == 1 {
            match headroom_server::gpu_metrics::GpuMetrics::nvml_on_cuda_device0() {
                Ok(g) => {
                    eprintln!("GPU: {}; /metrics shows it", g.describe());
                    state.metrics.set_gpu(g);
                }
                Err(reason) => eprintln!("no GPU clock, power or energy in /metrics: {reason}"),
            }
        }
        let state = Arc::new(state);
        let served = headroom_server::run::serve_until_signal(
            &self.host,
            self.port,
            state,
            self.grace,
            |addr| {
                println!("listening on http://{addr} (model `{name}`)");
                use std::io::Write;
                let _ = std::io::stdout().flush();
            },
        );
        // The model (and a group's NCCL communicators) is dropped before exit,
        // whether serving ended by a signal or an error.
        engine.shutdown_and_wait();
        served.context("serving")?;
        eprintln!("server stopped");
        Ok(())
    }
}

/// The context a served request may use: `--max-context` when given (never
/// above the model's `max_position_embeddings`: refused with both numbers),
/// else the model's limit (paged KV takes blocks only as a sequence grows;
/// the engine lowers it to what memory fits, `ContextFit::AtMost`).
pub(crate) fn serve_max_context(flag: Option<usize>, model_limit: usize) -> anyhow::Result<usize> {
    match flag {
        Some(n) if n > model_limit => bail!(
            "--max-context {n} is above the model's context of {model_limit} positions \
             (max_position_embeddings)"
        ),
        Some(n) => Ok(n),
        None => Ok(model_limit),
    }
}

#[cfg(test)]
mod max_context_tests {
    use super::serve_max_context;

    #[test]
    fn the_context_defaults_to_the_model_capped_and_never_exceeds_it() {
        assert_eq!(serve_max_context(None, 64).unwrap(), 64);
        assert_eq!(serve_max_context(None, 262_144).unwrap(), 262_144);
        assert_eq!(serve_max_context(Some(2048), 262_144).unwrap(), 2048);
        assert_eq!(serve_max_context(Some(64), 64).unwrap(), 64);
        let err = serve_max_context(Some(4096), 64).unwrap_err().to_string();
        assert!(err.contains("4096") && err.contains("64"), "{err}");
    }
}

#[cfg(test)]
mod limit_tests {
    use super::ServeLimitArgs;
    use std::time::Duration;

    fn args() -> ServeLimitArgs {
        ServeLimitArgs {
            header_timeout_s: 10.0,
            body_timeout_s: 30.0,
            write_timeout_s: 30.0,
            keep_alive_s: 0.5,
            max_connections: 4,
            api_key: None,
            protect_probes: false,
        }
    }

    #[test]
    fn connection_limit_flags_are_checked_and_named() {
        let l = args().limits().unwrap();
        assert_eq!(l.keep_alive_timeout, Duration::from_millis(500));
        assert_eq!(l.max_connections, 4);
        let e = ServeLimitArgs {
            max_connections: 0,
            ..args()
        };
        assert!(e
            .limits()
            .unwrap_err()
            .to_string()
            .contains("--max-connections"));
        let e = ServeLimitArgs {
            header_timeout_s: 1e300,
            ..args()
        };
        assert!(e
            .limits()
            .unwrap_err()
            .to_string()
            .contains("--header-timeout-s"));
        let e = ServeLimitArgs {
            body_timeout_s: -1.0,
            ..args()
        };
        assert!(e
            .limits()
            .unwrap_err()
            .to_string()
            .contains("--body-timeout-s"));
        let e = ServeLimitArgs {
            write_timeout_s: 0.0,
            ..args()
        };
        assert!(e
            .limits()
            .unwrap_err()
            .to_string()
            .contains("--write-timeout-s"));
        assert_eq!(l.write_timeout, Duration::from_secs(30));
    }

    #[test]
    fn a_negative_timeout_reaches_the_check_that_names_its_flag() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            limits: ServeLimitArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["t", "--keep-alive-s", "-1"]).unwrap();
        let e = cli.limits.limits().unwrap_err().to_string();
        assert!(e.contains("--keep-alive-s") && e.contains("-1"), "{e}");
    }
}
