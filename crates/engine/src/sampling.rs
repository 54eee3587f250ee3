//! The host sampling path: rows of requests that ask for penalties or log
//! probabilities ([`SamplingExtras::on_host`]) are read back as f32 and drawn
//! here, with the same semantics as the backends' `sample` (greedy = largest
//! finite logit, lowest index on ties; otherwise temperature, top-k, top-p
//! and the counter-based uniform `rng::uniform(seed, step)`), after the
//! penalties are applied. Log probabilities are the raw log-softmax of the
//! model's logits, before penalties and temperature. Other rows keep the
//! device path.

use crate::api::{SamplingExtras, TokenLogprobs};
use headroom_core::ops::{Backend, OpError, OpResult, SamplingParams};
use std::collections::HashMap;

/// One row to draw on the host: the sequence's sampling, step and tokens.
pub(crate) struct HostRow<'a> {
    /// The row's index in the logits.
    pub row: usize,
    pub params: SamplingParams,
    pub step: u64,
    pub extras: SamplingExtras,
    pub prompt: &'a [u32],
    pub generated: &'a [u32],
}

/// Draws every row of `host` from `logits` (`[n][vocab]` on the backend),
/// overwriting its entry of `tokens`; returns the log probabilities per
/// row of `logits` (`None` for rows not asked for).
pub(crate) fn draw_host_rows<B: Backend>(
    be: &B,
    logits: &B::Act,
    vocab: usize,
    host: &[HostRow<'_>],
    tokens: &mut [u32],
) -> OpResult<Vec<Option<TokenLogprobs>>> {
    let mut out = vec![None; tokens.len()];
    if host.is_empty() {
        return Ok(out);
    }
    let picked: Vec<usize> = host.iter().map(|h| h.row).collect();
    let data = if picked.len() == tokens.len() && picked.iter().enumerate().all(|(i, &r)| i == r) {
        be.act_to_f32(logits)?
    } else {
        be.act_to_f32(&be.gather_rows(logits, &picked)?)?
    };
    if vocab == 0 || data.len() != vocab * host.len() {
        return Err(OpError::shape(
            "host sample",
            format!("{} values for {} rows of {vocab}", data.len(), host.len()),
        ));
    }
    for (h, raw) in host.iter().zip(data.chunks_exact(vocab)) {
        let (token, lp) = draw(raw, h).ok_or_else(|| {
            OpError::shape("host sample", format!("row {} has no finite logit", h.row))
        })?;
        tokens[h.row] = token;
        out[h.row] = lp;
    }
    Ok(out)
}

/// The token `h` draws from its raw logits, with its log probabilities when asked.
pub(crate) fn draw(raw: &[f32], h: &HostRow<'_>) -> Option<(u32, Option<TokenLogprobs>)> {
    let token = if h.extras.penalised() {
        let mut l = raw.to_vec();
        apply_penalties(&mut l, &h.extras, h.prompt, h.generated);
        sample_row(&l, &h.params, h.step)?
    } else {
        sample_row(raw, &h.params, h.step)?
    };
    let lp = h.extras.logprobs.map(|k| {
        let all = log_softmax(raw);
        TokenLogprobs {
            token,
            logprob: all[token as usize],
            top: top_k(&all, k),
        }
    });
    Some((token, lp))
}

/// vLLM's order: the repetition penalty over prompt and generated tokens
/// (positive logits divided, others multiplied), then OpenAI's frequency
/// (per occurrence) and presence (once) penalties over the generated tokens.
pub fn apply_penalties(logits: &mut [f32], e: &SamplingExtras, prompt: &[u32], generated: &[u32]) {
    if e.repetition_penalty != 1.0 {
        let p = e.repetition_penalty;
        let mut seen = vec![false; logits.len()];
        for &t in prompt.iter().chain(generated) {
            if let Some(s) = seen.get_mut(t as usize) {
                if !*s {
                    *s = true;
                    let x = &mut logits[t as usize];
                    *x = if *x > 0.0 { *x / p } else { *x * p };
                }
            }
        }
    }
    if e.frequency_penalty != 0.0 || e.presence_penalty != 0.0 {
        let mut counts: HashMap<u32, u32> = HashMap::new();
        for &t in generated {
            *counts.entry(t).or_default() += 1;
        }
        for (t, c) in counts {
            if let Some(x) = logits.get_mut(t as usize) {
                *x -= e.frequency_penalty * c as f32 + e.presence_penalty;
            }
        }
    }
}

/// `log softmax` of `logits` over its finite entries (computed in f64);
/// a non-finite logit gets `-inf`.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits
        .iter()
        .filter(|x| x.is_finite())
        .fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let sum: f64 = logits
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| (x as f64 - max).exp())
        .sum();
    let lse = max + sum.ln();
    logits
        .iter()
        .map(|&x| {
            if x.is_finite() {
                (x as f64 - lse) as f32
            } else {
                f32::NEG_INFINITY
            }
        })
        .collect()
}

/// The `k` largest entries of `logprobs` as `(token, logprob)`, largest
/// first, lowest index on ties.
pub fn top_k(logprobs: &[f32], k: usize) -> Vec<(u32, f32)> {
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let mut all: Vec<(u32, f32)> = logprobs
        .iter()
        .enumerate()
        .map(|(i, &x)| (i as u32, x))
        .collect();
    if k == 0 {
        return Vec::new();
    }
    if all.len() > k {
        all.select_nth_unstable_by(k - 1, order);
        all.truncate(k);
    }
    all.sort_by(order);
    all
}

pub use headroom_core::ops::sample_row;

#[cfg(test)]
mod tests;
