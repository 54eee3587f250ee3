//! Greedy or temperature / top-k / top-p sampling of one row of logits, with
//! the counter-based uniform of `headroom_core::ops::rng` (one draw per
//! `(seed, step)`), so a request's tokens do not depend on what else ran.

use crate::CpuAct;
use headroom_core::ops::{OpError, OpResult, SamplingParams};

/// One token per row of `logits` `[n][vocab]`, row `i` drawn by
/// [`sample_row`] with `params[i]` at step `steps[i]` (the backend's `sample`).
pub(crate) fn sample_rows(
    logits: &CpuAct,
    params: &[SamplingParams],
    steps: &[u64],
) -> OpResult<Vec<u32>> {
    if params.len() != logits.rows || steps.len() != logits.rows {
        return Err(OpError::shape(
            "sample",
            format!(
                "{} rows, {} params, {} steps",
                logits.rows,
                params.len(),
                steps.len()
            ),
        ));
    }
    logits
        .data
        .chunks_exact(logits.cols.max(1))
        .zip(params.iter().zip(steps))
        .enumerate()
        .map(|(row, (l, (p, &s)))| {
            sample_row(l, p, s)
                .ok_or_else(|| OpError::shape("sample", format!("row {row} has no finite logit")))
        })
        .collect()
}

pub use headroom_core::ops::sample_row;

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            seed,
        }
    }

    #[test]
    fn greedy_takes_the_largest_finite_logit_lowest_index_on_ties() {
        let g = params(0.0, 1.0, 0, 1);
        assert_eq!(sample_row(&[0.1, f32::NAN, 3.0, 2.9], &g, 0), Some(2));
        assert_eq!(sample_row(&[1.0, 3.0, 3.0], &g, 0), Some(1));
        assert_eq!(sample_row(&[f32::NAN, f32::NAN], &g, 0), None);
    }

    #[test]
    fn sampling_is_seeded_and_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln(), f32::NEG_INFINITY];
        let draw = |seed| {
            (0..4000)
                .map(|s| sample_row(&logits, &params(1.0, 1.0, 0, seed), s).unwrap())
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
    fn top_p_and_top_k_keep_only_the_head() {
        // probabilities 0.6, 0.3, 0.1: top_p 0.5 keeps only token 0; 0.8 keeps 0 and 1.
        let logits = [0.6f32.ln(), 0.3f32.ln(), 0.1f32.ln()];
        assert!((0..500).all(|s| sample_row(&logits, &params(1.0, 0.5, 0, 3), s) == Some(0)));
        let picks: Vec<u32> = (0..2000)
            .map(|s| sample_row(&logits, &params(1.0, 0.8, 0, 3), s).unwrap())
            .collect();
        assert!(picks.contains(&1) && !picks.contains(&2));
        let k2: Vec<u32> = (0..2000)
            .map(|s| sample_row(&logits, &params(1.0, 1.0, 2, 3), s).unwrap())
            .collect();
        assert!(k2.contains(&1) && !k2.contains(&2));
    }
}
