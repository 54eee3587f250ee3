//! Greedy or temperature / top-k / top-p sampling of one row of logits on
//! the host, with the counter-based uniform of [`crate::ops::rng`] (one draw
//! per `(seed, step)`): the CPU backend's `sample` and the engine's host
//! path (penalties, logprobs) draw with it, so both draw the same token.

use crate::ops::{rng, SamplingParams};

/// The token drawn from `logits` with `p` at `step`; `None` when no logit
/// is finite.
pub fn sample_row(logits: &[f32], p: &SamplingParams, step: u64) -> Option<u32> {
    let finite = || logits.iter().enumerate().filter(|(_, x)| x.is_finite());
    // Largest finite logit, lowest index on ties.
    let (best, &max) = finite().fold(None, |acc: Option<(usize, &f32)>, (i, x)| match acc {
        Some((_, m)) if *m >= *x => acc,
        _ => Some((i, x)),
    })?;
    if p.temperature <= 0.0 {
        return Some(best as u32);
    }
    let t = p.temperature as f64;
    let mut probs: Vec<(usize, f64)> = finite()
        .map(|(i, &x)| (i, ((x as f64 - max as f64) / t).exp()))
        .collect();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 && probs.len() > p.top_k {
        probs.truncate(p.top_k);
    }
    let total: f64 = probs.iter().map(|q| q.1).sum();
    let mut kept = 0.0;
    let mut n = 0;
    for q in &probs {
        kept += q.1;
        n += 1;
        if kept >= p.top_p as f64 * total {
            break;
        }
    }
    probs.truncate(n);
    let mut u = rng::uniform(p.seed, step) * kept;
    for &(i, q) in &probs {
        if u < q {
            return Some(i as u32);
        }
        u -= q;
    }
    probs.last().map(|q| q.0 as u32)
}
