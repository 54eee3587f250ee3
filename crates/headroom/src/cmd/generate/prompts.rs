//! The requests `headroom generate` runs: one prompt (`--prompt`,
//! `--prompt-file`) or a JSON-lines file (`--prompts`), encoded and checked
//! against the vocabulary and the model's context; and the end-of-sequence
//! ids of a checkpoint's `generation_config.json`.

use super::Args;
use anyhow::{bail, Context};
use headroom_core::ops::SamplingParams;
use headroom_engine::GenerateRequest;
use headroom_model::tokenizer::TextCodec;
use serde::Deserialize;
use std::io::BufRead;
use std::path::Path;

/// Largest `--prompts` file read (bytes) and most requests in it.
const MAX_PROMPTS_BYTES: u64 = 256 << 20;
const MAX_PROMPTS: usize = 100_000;
/// Largest `--prompt-file` read (bytes): far beyond any context in tokens.
const MAX_PROMPT_FILE_BYTES: u64 = 64 << 20;

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

pub(super) fn check_sampling(temperature: f32, top_p: f32, what: &str) -> anyhow::Result<()> {
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
pub(super) fn fit_context(
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
pub(super) fn build_requests(
    a: &Args,
    codec: &TextCodec,
    vocab: usize,
) -> anyhow::Result<Vec<GenerateRequest>> {
    let one = |ids| GenerateRequest {
        prompt_ids: ids,
        sampling: sampling(a),
        max_tokens: a.max_tokens,
        stop_token_ids: Vec::new(),
        ignore_eos: false,
        extras: Default::default(),
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
        let p = prompt_line(&line).with_context(|| format!("{what}: not a prompt line"))?;
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
            max_tokens: match p.max_tokens {
                Some(0) => bail!("{what}: max_tokens must be at least 1 (got 0)"),
                m => m.unwrap_or(a.max_tokens),
            },
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            extras: Default::default(),
        });
    }
    if out.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(out)
}

/// End-of-sequence ids from `generation_config.json`, when the folder has one.
pub(super) fn generation_eos(dir: &Path) -> Vec<u32> {
    let Some(text) = crate::model_source::read_generation_config(dir) else {
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

/// One `--prompts` line; an error names the field (`max_tokens: invalid value: ...`).
fn prompt_line(line: &str) -> anyhow::Result<PromptLine> {
    let mut de = serde_json::Deserializer::from_str(line);
    let p = serde_path_to_error::deserialize(&mut de)?;
    de.end()?;
    Ok(p)
}
