//! Sparse MoE routing: router softmax (f32), top-k, optional renormalisation,
//! and grouping of tokens by expert (so each expert runs one GEMM).
//!
//! As transformers' `Qwen3_5MoeTopKRouter`: probabilities are the softmax of
//! the router logits over all experts; the top-k keep their probability,
//! divided by the sum of the k kept when `renormalise` (`norm_topk_prob`).

/// The experts chosen for each token and their weights, `[T][top_k]` each.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    pub top_k: usize,
    pub experts: Vec<u32>,
    pub weights: Vec<f32>,
}

/// Routes `T` tokens from their router logits `[T][num_experts]`.
pub fn route(logits: &[f32], num_experts: usize, top_k: usize, renormalise: bool) -> Routing {
    assert!(
        top_k >= 1 && top_k <= num_experts,
        "top_k must be in 1..=num_experts"
    );
    assert_eq!(logits.len() % num_experts, 0);
    let t_len = logits.len() / num_experts;
    let mut experts = Vec::with_capacity(t_len * top_k);
    let mut weights = Vec::with_capacity(t_len * top_k);
    let mut probs = vec![0.0f32; num_experts];
    let mut order: Vec<u32> = Vec::with_capacity(num_experts);
    for row in logits.chunks_exact(num_experts) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for (p, &l) in probs.iter_mut().zip(row) {
            *p = (l - max).exp();
            sum += *p;
        }
        for p in probs.iter_mut() {
            *p /= sum;
        }
        order.clear();
        order.extend(0..num_experts as u32);
        // Descending probability, lower index first on ties; NaN sorts last.
        order.sort_by(|&a, &b| {
            let (pa, pb) = (probs[a as usize], probs[b as usize]);
            pb.partial_cmp(&pa)
                .unwrap_or_else(|| pa.is_nan().cmp(&pb.is_nan()))
                .then(a.cmp(&b))
        });
        let chosen = &order[..top_k];
        let kept: f32 = chosen.iter().map(|&e| probs[e as usize]).sum();
        for &e in chosen {
            experts.push(e);
            let p = probs[e as usize];
            weights.push(if renormalise { p / kept } else { p });
        }
    }
    Routing {
        top_k,
        experts,
        weights,
    }
}

impl Routing {
    /// For each expert, the `(token, weight)` pairs routed to it, in token order.
    pub fn by_expert(&self, num_experts: usize) -> Vec<Vec<(usize, f32)>> {
        let mut groups = vec![Vec::new(); num_experts];
        for (i, (&e, &w)) in self.experts.iter().zip(&self.weights).enumerate() {
            groups[e as usize].push((i / self.top_k, w));
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::test_util::{rng, uniform};

    #[test]
    fn top_k_of_softmax_with_and_without_renormalisation() {
        let logits = [1.0f32, 3.0, 2.0, -1.0];
        let z: f64 = logits.iter().map(|&l| (l as f64).exp()).sum();
        let p = |i: usize| (logits[i] as f64).exp() / z;
        let r = route(&logits, 4, 2, false);
        assert_eq!(r.experts, vec![1, 2]);
        assert!((r.weights[0] as f64 - p(1)).abs() < 1e-7);
        assert!((r.weights[1] as f64 - p(2)).abs() < 1e-7);
        let r = route(&logits, 4, 2, true);
        assert!((r.weights[0] as f64 - p(1) / (p(1) + p(2))).abs() < 1e-7);
        assert!((r.weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn grouping_lists_every_assignment_once() {
        let mut g = rng(12);
        let (t, e, k) = (50, 8, 3);
        let r = route(&uniform(&mut g, t * e, 3.0), e, k, true);
        let groups = r.by_expert(e);
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), t * k);
        for (tok, chosen) in r.experts.chunks(k).enumerate() {
            let mut uniq = chosen.to_vec();
            uniq.sort_unstable();
            uniq.dedup();
            assert_eq!(uniq.len(), k, "a token picked one expert twice");
            for &ex in chosen {
                assert!(groups[ex as usize].iter().any(|&(tt, _)| tt == tok));
            }
        }
    }
}
