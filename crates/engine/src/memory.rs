//! Admission by memory: the bytes a request will need ([`MemoryModel::predict`]):
//! its KV rows for prompt + max tokens, its GDN slot, and the transient peak
//! of its attention calls under each full-attention layer's route — composed
//! grows with `qL × kv_len`, fused is bounded by its tiles.
//!
//! The transient formulas are each backend's exact workspace accounting:
//! * CPU (`headroom_attention_cpu`): per worker thread (`min(threads, tasks)`)
//!   one scratch set; composed `(2·qb·d + qb·kv_len + qb)·4` bytes, fused
//!   `(2·M·d + 2·T·d + M·T + 2·M)·4` with `M = group · rows_per_head`, `T` the KV tile.
//!   Tasks are `kv_heads × query blocks` (a slot read whole) — the larger of
//!   the CPU backend's two call shapes, so the prediction is an upper bound.
//! * CUDA (`headroom_cuda::attention::composed_workspace_bytes`, per KV head
//!   call): composed `group · qb · kv_len · (4 + 2)`; fused allocates no
//!   workspace beyond its tiles in shared memory (0).
//!
//! The bound is exact when a request's last prefill chunk holds at least one
//! full query block (composed) or tile (fused); it never under-predicts.

use headroom_attention_cpu::fused::{rows_per_head, FUSED_KV_TILE};
use headroom_core::{BackendKind, LayerKind, RouteRequest};
use serde::Serialize;

/// One full-attention layer as the memory model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttentionLayer {
    pub layer: usize,
    pub kind: LayerKind,
    pub route: RouteRequest,
}

/// A request's predicted bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Prediction {
    pub kv_bytes: u64,
    pub gdn_bytes: u64,
    pub transient_bytes: u64,
}

impl Prediction {
    pub fn total(&self) -> u64 {
        self.kv_bytes
            .saturating_add(self.gdn_bytes)
            .saturating_add(self.transient_bytes)
    }

    /// `kv … + gdn … + transient …` for messages.
    pub fn detail(&self) -> String {
        format!(
            "KV {} + GDN slot {} + attention transient {} bytes",
            self.kv_bytes, self.gdn_bytes, self.transient_bytes
        )
    }
}

/// Everything needed to predict a request's memory, without the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryModel {
    pub backend: BackendKind,
    /// KV bytes of one token over every full-attention layer.
    pub kv_bytes_per_token: u64,
    /// Bytes of one sequence's GDN state over every linear-attention layer.
    pub gdn_bytes_per_slot: u64,
    pub attention: Vec<AttentionLayer>,
    /// Worker threads of the attention kernels (CPU).
    pub threads: usize,
}

impl MemoryModel {
    /// Predicted bytes of a request of `prompt` tokens generating up to
    /// `max_tokens`, its prefill chunks at most `max_chunk` tokens.
    pub fn predict(&self, prompt: usize, max_tokens: usize, max_chunk: usize) -> Prediction {
        let rows = prompt.saturating_add(max_tokens) as u64;
        let q = max_chunk.clamp(1, prompt.max(1));
        let last_kv = prompt.saturating_add(max_tokens.saturating_sub(1));
        let transient = self
            .attention
            .iter()
            .map(|a| {
                let prefill = self.attention_transient(a, q, prompt.max(1));
                let decode = self.attention_transient(a, 1, last_kv.max(1));
                prefill.max(decode)
            })
            .max()
            .unwrap_or(0);
        Prediction {
            kv_bytes: self.kv_bytes_per_token.saturating_mul(rows),
            gdn_bytes: self.gdn_bytes_per_slot,
            transient_bytes: transient,
        }
    }

    /// Transient bytes of one attention call of `q_len` rows over `kv_len` keys.
    pub fn attention_transient(&self, a: &AttentionLayer, q_len: usize, kv_len: usize) -> u64 {
        let k = a.kind;
        let (d, kvh) = (k.head_dim as u64, k.kv_heads.max(1) as u64);
        let group = (k.q_heads / k.kv_heads.max(1)).max(1) as u64;
        let (q, kv) = (q_len.max(1) as u64, kv_len as u64);
        match (self.backend, a.route) {
            (BackendKind::Cpu, RouteRequest::Composed { query_block }) => {
                let qb = if query_block == 0 {
                    q
                } else {
                    (query_block as u64).min(q)
                };
                let workers = (self.threads as u64).min(kvh * q.div_ceil(qb)).max(1);
                workers * (2 * qb * d + qb * kv + qb) * 4
            }
            (BackendKind::Cpu, RouteRequest::Fused) => {
                let rows = (rows_per_head(group as usize) as u64).min(q);
                let workers = (self.threads as u64).min(kvh * q.div_ceil(rows)).max(1);
                let (m, t) = (group * rows, FUSED_KV_TILE as u64);
                workers * (2 * m * d + 2 * t * d + m * t + 2 * m) * 4
            }
            (BackendKind::Cuda, RouteRequest::Composed { query_block }) => {
                let qb = if query_block == 0 {
                    q
                } else {
                    (query_block as u64).min(q)
                };
                group * qb * kv * (4 + 2)
            }
            (BackendKind::Cuda, RouteRequest::Fused) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::{AttentionKind, Dtype};

    fn model(route: RouteRequest, threads: usize) -> MemoryModel {
        MemoryModel {
            backend: BackendKind::Cpu,
            kv_bytes_per_token: 1000,
            gdn_bytes_per_slot: 77,
            attention: vec![AttentionLayer {
                layer: 3,
                kind: LayerKind {
                    attention: AttentionKind::Full,
                    head_dim: 64,
                    q_heads: 4,
                    kv_heads: 2,
                    dtype: Dtype::F32,
                },
                route,
            }],
            threads,
        }
    }

    #[test]
    fn composed_grows_with_kv_len_and_fused_does_not() {
        let c = model(RouteRequest::Composed { query_block: 128 }, 2);
        let small = c.predict(1024, 8, 512);
        let big = c.predict(8192, 8, 512);
        assert_eq!(small.kv_bytes, 1032 * 1000);
        assert_eq!(small.gdn_bytes, 77);
        assert_eq!(small.transient_bytes, 2 * (2 * 128 * 64 + 128 * 1024 + 128) * 4);
        assert!(big.transient_bytes > 7 * small.transient_bytes);
        let f = model(RouteRequest::Fused, 2);
        assert_eq!(
            f.predict(1024, 8, 512).transient_bytes,
            f.predict(8192, 8, 512).transient_bytes
        );
        assert_eq!(small.total(), small.kv_bytes + 77 + small.transient_bytes);
    }

    #[test]
    fn cuda_composed_matches_its_workspace_formula() {
        let mut c = model(RouteRequest::Composed { query_block: 0 }, 1);
        c.backend = BackendKind::Cuda;
        // group 2, qb = q_len = 100, kv_len 300.
        assert_eq!(
            c.attention_transient(&c.attention[0], 100, 300),
            2 * 100 * 300 * 6
        );
    }
}
