//! `headroom logits`: prefill a token id list and write the logits of every
//! position (`logits`, f32, `[T, vocab]`) to a safetensors file. Also hosts
//! the model loading that `generate` shares.

use crate::attention_setup::attention_plan;
use crate::backend_select::{
    load_config, run_on_backend, BackendSettings, LoadInfo, ModelJob, WeightsInit,
};
use crate::describe::routes_that_ran;
use crate::global::GlobalArgs;
use crate::model_source::ModelSource;
use anyhow::{bail, Context};
use headroom_core::BackendKind;
use headroom_model::weights::{expected_storage_bytes, write_safetensors};
use headroom_model::{AttentionPlan, ForwardOptions, LogitsRows};
use headroom_model::{ModelConfig, Qwen35Model, Tensor};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub forward: ForwardArgs,
    /// JSON array of token ids below the model's vocab_size, e.g. `[1, 42, 7]`
    /// (at most max_position_embeddings of them).
    #[arg(long, value_name = "IDS.json")]
    pub ids: PathBuf,
    /// Output safetensors file: one f32 tensor `logits` of shape [T, vocab].
    #[arg(long, value_name = "OUT.safetensors")]
    pub out: PathBuf,
}

/// The options `logits` and `generate` share: the model, the backend, the
/// prefill chunk and a synthetic model's weights seed.
#[derive(clap::Args, Debug)]
pub struct ForwardArgs {
    #[command(flatten)]
    pub source: ModelSource,
    /// Compute backend: cpu (f32 activations) or cuda (bf16 activations, device 0).
    #[arg(long, default_value = "cpu", value_name = "cpu|cuda")]
    pub backend: BackendKind,
    /// Where a synthetic model's weights are drawn (default: host on cpu, device on cuda).
    #[arg(long, value_enum, value_name = "host|device")]
    pub weights_init: Option<WeightsInit>,
    /// Prefill chunk size in tokens (default: the whole prompt in one pass).
    #[arg(long, value_name = "N")]
    pub chunk: Option<usize>,
    /// Seed of a synthetic model's weights.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub weights_seed: u64,
    #[command(flatten)]
    pub tp: crate::tp::TpArgs,
}

/// Refuses, with a clear error, a model whose weights alone exceed this
/// machine's available memory (instead of being killed for it midway).
/// Skipped where `/proc/meminfo` is not readable.
pub(crate) fn check_memory(cfg: &ModelConfig, what: &str) -> anyhow::Result<()> {
    let need = expected_storage_bytes(cfg);
    let Some(available) = available_memory_bytes() else {
        return Ok(());
    };
    if need > available {
        bail!(
            "{what} needs {:.1} GB for its weights but this machine has {:.1} GB available{}",
            need as f64 / 1e9,
            available as f64 / 1e9,
            if cfg.num_hidden_layers > 1 {
                " (a synthetic model can be cut with :layers=N)"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub(crate) fn available_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Reads a JSON array of token ids and checks each against the vocabulary.
pub fn read_ids(path: &Path, vocab: usize) -> anyhow::Result<Vec<u32>> {
    /// The largest ids file read (10^6 ids of 7 digits fit easily).
    const MAX_IDS_BYTES: u64 = 64 << 20;
    let text = crate::input_file::read_input_text("--ids", path, MAX_IDS_BYTES)?;
    let ids: Vec<u64> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected a JSON array of non-negative token ids",
            path.display()
        )
    })?;
    if ids.is_empty() {
        bail!("{}: no token ids", path.display());
    }
    ids.iter()
        .enumerate()
        .map(|(pos, &id)| {
            if id as u128 >= vocab as u128 {
                bail!("token id {id} at position {pos} is out of range (vocab_size {vocab})");
            }
            Ok(id as u32)
        })
        .collect()
}

pub fn run(a: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    if a.forward.chunk == Some(0) {
        bail!("--chunk must be at least 1");
    }
    let source = &a.forward.source;
    let cfg = load_config(source)?;
    let mut inputs: Vec<&Path> = vec![&a.ids];
    inputs.extend(source.model.as_deref());
    crate::output::check_output_path("--out", &a.out, &inputs)?;
    let host_weights = a.forward.backend == BackendKind::Cpu
        || source.model.is_some()
        || a.forward.weights_init == Some(WeightsInit::Host);
    if host_weights {
        check_memory(&cfg, "the model")?;
    }
    let ids = read_ids(&a.ids, cfg.vocab_size)?;
    cfg.check_sequence_length(ids.len())
        .with_context(|| format!("--ids {}", a.ids.display()))?;
    if a.forward.tp.active() {
        let (_, attention) =
            crate::tp::plan_and_routes(g, a.forward.backend, &cfg, a.forward.tp.world())?;
        let job = crate::tp::LogitsJob {
            ids,
            attention,
            chunk: a.forward.chunk,
            out: a.out.clone(),
        };
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
    let attention = attention_plan(g, a.forward.backend, &cfg)?;
    let job = LogitsJob {
        ids,
        attention,
        chunk: a.forward.chunk,
        out: a.out.clone(),
        model: source.label(),
    };
    run_on_backend(
        a.forward.backend,
        BackendSettings::default(),
        source,
        &cfg,
        a.forward.weights_seed,
        a.forward.weights_init,
        job,
    )
}

/// Prefill the ids and write every position's logits.
struct LogitsJob {
    ids: Vec<u32>,
    attention: AttentionPlan,
    chunk: Option<usize>,
    out: PathBuf,
    /// The model, in words (`synthetic tiny-d64` or the folder).
    model: String,
}

impl ModelJob for LogitsJob {
    type Output = ();

    fn run<B: headroom_core::ops::Backend + 'static>(
        self,
        model: Qwen35Model<B>,
        info: &LoadInfo,
    ) -> anyhow::Result<()> {
        let opts = ForwardOptions {
            attention: self.attention,
            chunk: self.chunk,
            logits: LogitsRows::All,
        };
        let mut session = model.new_session_with_capacity(self.ids.len())?;
        let started = Instant::now();
        let out = model
            .prefill(&mut session, &self.ids, &opts)
            .context("forward")?;
        let secs = started.elapsed().as_secs_f64();
        let non_finite = out.logits.iter().filter(|x| !x.is_finite()).count();
        if non_finite > 0 {
            bail!(
                "the forward produced {non_finite} non-finite logits (NaN or Inf) of {}; \
                 nothing written to {} (the weights or a kernel are broken)",
                out.logits.len(),
                self.out.display()
            );
        }
        let logits = Tensor::from_f32(vec![out.rows, out.vocab], out.logits);
        write_safetensors(&self.out, &[("logits", &logits)])
            .with_context(|| format!("writing {}", self.out.display()))?;
        eprintln!(
            "logits on {}: {}; attention that ran: {}; logits [{}, {}] written to {}",
            info.backend,
            self.model,
            routes_that_ran(&out.attention),
            out.rows,
            out.vocab,
            self.out.display()
        );
        eprintln!(
            "timings: model load {:.3} s; prefill {} tokens in {:.3} s ({:.1} tokens/s, \
             including the kernels' first use)",
            info.load_seconds,
            self.ids.len(),
            secs,
            self.ids.len() as f64 / secs.max(1e-9),
        );
        Ok(())
    }
}
