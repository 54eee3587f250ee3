//! `headroom generate`: prefill a prompt, then decode token by token,
//! streaming the text to stdout. Greedy by default; with `--temperature T`
//! (> 0) it samples from softmax(logits / T) restricted to the top-p nucleus,
//! with a seeded generator (same seed, same text).
//!
//! Text: a checkpoint's `tokenizer.json`; a synthetic model (no tokenizer)
//! uses the byte-level fallback of `headroom_model::tokenizer` (one id per
//! UTF-8 byte; ids ≥ 256 print as `<|ID|>`): a synthetic model's weights are
//! random, so its text is gibberish. Control characters in the generated text
//! (other than newline and tab) are printed escaped (`\u{1b}`), never raw.
//!
//! The prompt must fit the model's context (`max_position_embeddings`);
//! `--max-tokens` beyond the room left is clamped, with a warning.

use super::logits::{attention_plan, ForwardArgs};
use crate::global::GlobalArgs;
use anyhow::{bail, Context};
use headroom_model::tokenizer::{StreamDecoder, TextCodec, Tokenizer};
use headroom_model::{ForwardOptions, LogitsRows, Qwen35Model};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub forward: ForwardArgs,
    /// The prompt text.
    #[arg(
        long,
        required_unless_present = "prompt_file",
        conflicts_with = "prompt_file"
    )]
    pub prompt: Option<String>,
    /// Read the prompt from a UTF-8 text file instead (e.g. a long prompt for a prefill measurement).
    #[arg(long, value_name = "PATH")]
    pub prompt_file: Option<std::path::PathBuf>,
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
    /// Sampling seed.
    #[arg(long, default_value_t = 0, value_name = "S")]
    pub seed: u64,
}

pub fn run(a: Args, g: &GlobalArgs) -> anyhow::Result<()> {
    if !(a.temperature.is_finite() && a.temperature >= 0.0) {
        bail!(
            "--temperature must be a number >= 0 (got {})",
            a.temperature
        );
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1] (got {})", a.top_p);
    }
    let loaded = a.forward.load_model()?;
    let cfg = &loaded.config;
    let (codec, mut eos) = match &loaded.dir {
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
    let prompt = match (&a.prompt, &a.prompt_file) {
        (Some(p), _) => p.clone(),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the prompt file {}", path.display()))?,
        (None, None) => bail!("give --prompt TEXT or --prompt-file PATH"),
    };
    let ids = codec.encode(&prompt)?;
    if ids.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    if let Some(pos) = ids.iter().position(|&id| id as usize >= cfg.vocab_size) {
        bail!(
            "token id {} at position {pos} is out of range (vocab_size {})",
            ids[pos],
            cfg.vocab_size
        );
    }
    cfg.check_sequence_length(ids.len())
        .with_context(|| format!("the prompt ({} tokens)", ids.len()))?;
    let room = cfg.max_position_embeddings - ids.len();
    let max_tokens = a.max_tokens.min(room);
    if max_tokens < a.max_tokens {
        tracing::warn!(
            "--max-tokens {} clamped to {max_tokens}: the prompt's {} tokens leave {room} of the model's {} positions",
            a.max_tokens,
            ids.len(),
            cfg.max_position_embeddings
        );
    }
    let attention = attention_plan(g, a.forward.backend, cfg)?;
    let model = Qwen35Model::new(cfg, &loaded.weights).context("building the model")?;
    let mut opts = ForwardOptions {
        attention,
        chunk: a.forward.chunk,
        logits: LogitsRows::Last,
    };
    let mut sampler = Sampler::new(a.temperature, a.top_p, a.seed);
    let mut session = model.new_session()?;
    let started = Instant::now();
    let mut logits = model.prefill(&mut session, &ids, &opts)?.logits;
    let ttft = started.elapsed().as_secs_f64();
    opts.chunk = None;

    let mut stdout = std::io::stdout().lock();
    let mut stream = StreamDecoder::new();
    let mut generated = 0usize;
    let decode_started = Instant::now();
    for step in 0..max_tokens {
        let next = sampler.pick(&logits)?;
        generated += 1;
        if eos.contains(&next) {
            break;
        }
        let text = crate::output::escape_generated(&stream.push(&codec, next)?);
        write!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .context("writing to stdout")?;
        if step + 1 < max_tokens {
            logits = model.prefill(&mut session, &[next], &opts)?.logits;
        }
    }
    let tail = crate::output::escape_generated(&stream.finish(&codec)?);
    writeln!(stdout, "{tail}")
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    let decode_secs = decode_started.elapsed().as_secs_f64();
    eprintln!(
        "prompt {} tokens, prefill {:.3} s ({:.1} tokens/s); generated {} tokens in {:.3} s ({:.1} tokens/s)",
        ids.len(),
        ttft,
        ids.len() as f64 / ttft,
        generated,
        decode_secs,
        generated as f64 / decode_secs.max(1e-9)
    );
    Ok(())
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

/// Greedy or seeded temperature / top-p sampling over one row of logits.
struct Sampler {
    temperature: f32,
    top_p: f32,
    state: u64,
}

impl Sampler {
    fn new(temperature: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler {
            temperature,
            top_p,
            state: seed ^ 0x5DEE_CE66_D1CE_4E5B,
        }
    }

    /// SplitMix64: a uniform in [0, 1).
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    fn pick(&mut self, logits: &[f32]) -> anyhow::Result<u32> {
        let finite = || logits.iter().enumerate().filter(|(_, x)| x.is_finite());
        let (best, &max) = finite()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .context("the model produced no finite logit")?;
        if self.temperature == 0.0 {
            return Ok(best as u32);
        }
        let t = self.temperature as f64;
        let mut probs: Vec<(usize, f64)> = finite()
            .map(|(i, &x)| (i, ((x as f64 - max as f64) / t).exp()))
            .collect();
        let total: f64 = probs.iter().map(|p| p.1).sum();
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut kept = 0.0;
        let mut n = 0;
        for p in &probs {
            kept += p.1;
            n += 1;
            if kept >= self.top_p as f64 * total {
                break;
            }
        }
        probs.truncate(n);
        let mut u = self.uniform() * kept;
        for &(i, p) in &probs {
            if u < p {
                return Ok(i as u32);
            }
            u -= p;
        }
        Ok(probs[probs.len() - 1].0 as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_largest_finite_logit() {
        let mut s = Sampler::new(0.0, 1.0, 1);
        assert_eq!(s.pick(&[0.1, f32::NAN, 3.0, 2.9]).unwrap(), 2);
        assert!(s.pick(&[f32::NAN, f32::NAN]).is_err());
    }

    #[test]
    fn sampling_is_seeded_and_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln(), f32::NEG_INFINITY];
        let draw = |seed| {
            let mut s = Sampler::new(1.0, 1.0, seed);
            (0..4000)
                .map(|_| s.pick(&logits).unwrap())
                .collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7));
        assert_ne!(a, draw(8));
        let ones = a.iter().filter(|&&i| i == 1).count() as f64 / a.len() as f64;
        assert!((ones - 0.75).abs() < 0.03, "p(1) = {ones}");
        assert!(!a.contains(&2));
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // probabilities 0.6, 0.3, 0.1: top_p 0.5 keeps only token 0; 0.8 keeps 0 and 1.
        let logits = [0.6f32.ln(), 0.3f32.ln(), 0.1f32.ln()];
        let mut s = Sampler::new(1.0, 0.5, 3);
        assert!((0..500).all(|_| s.pick(&logits).unwrap() == 0));
        let mut s = Sampler::new(1.0, 0.8, 3);
        let picks: Vec<u32> = (0..2000).map(|_| s.pick(&logits).unwrap()).collect();
        assert!(picks.contains(&1) && !picks.contains(&2));
    }
}
