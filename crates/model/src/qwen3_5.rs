//! The Qwen3.5 / Qwen3.6 forward on the CPU: embeddings → decoder layers
//! (zero-centred RMSNorm → Gated DeltaNet or gated full attention →
//! residual → RMSNorm → MoE or dense MLP → residual) → final norm → LM head
//! (tied to the embeddings or not).
//!
//! A [`Session`] carries the per-layer state between calls — the KV cache of
//! full-attention layers, the conv and recurrent states of Gated DeltaNet
//! layers — so a prompt prefilled in chunks of any size gives the same
//! logits as one pass, and decoding proceeds one token at a time.

mod build;
mod options;

pub use options::{
    AttentionPlan, ForwardOptions, ForwardOutput, LayerAttentionReport, LogitsRows, ModelError,
};

use crate::config::ModelConfig;
use crate::layers::{FullAttention, GatedDeltaNet, GdnState, KvCache, Mlp};
use crate::ops::rms_norm::rms_norm_offset;
use crate::ops::{linear, WeightView};
use crate::{Tensor, Weights};
use headroom_core::fused_capability::fused_support;
use headroom_core::{AttentionKind, BackendKind, Dtype, LayerKind, RouteRequest};
use std::time::Instant;

/// The token mixer of one decoder layer.
#[derive(Debug, Clone)]
pub(crate) enum Mixer<'w> {
    Full(FullAttention<'w>),
    Linear(GatedDeltaNet<'w>),
}

#[derive(Debug, Clone)]
pub(crate) struct Decoder<'w> {
    input_norm: Vec<f32>,
    post_norm: Vec<f32>,
    mixer: Mixer<'w>,
    mlp: Mlp<'w>,
}

/// The state of one layer between forward calls.
#[derive(Debug, Clone, PartialEq)]
pub enum LayerState {
    Full(KvCache),
    Linear(GdnState),
}

/// Per-request state: tokens seen so far and every layer's cache.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    position: usize,
    layers: Vec<LayerState>,
}

impl Session {
    /// Tokens processed so far (the position of the next token).
    pub fn position(&self) -> usize {
        self.position
    }

    pub fn layers(&self) -> &[LayerState] {
        &self.layers
    }
}

/// A Qwen3.5-family text model over borrowed weights.
#[derive(Debug, Clone)]
pub struct Qwen35Model<'w> {
    hidden: usize,
    vocab: usize,
    eps: f32,
    embed: &'w Tensor,
    lm_head: WeightView<'w>,
    final_norm: Vec<f32>,
    layers: Vec<Decoder<'w>>,
}

impl<'w> Qwen35Model<'w> {
    /// Builds the model from its config (validated first) and canonical
    /// weights; every tensor it reads is checked for presence and shape.
    pub fn new(cfg: &ModelConfig, weights: &'w Weights) -> Result<Qwen35Model<'w>, ModelError> {
        cfg.validate()?;
        let src = build::Source { weights };
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let embed = src.tensor("embed_tokens.weight", &[v, h])?;
        let lm_head = if cfg.tie_word_embeddings {
            WeightView::matrix(embed)
        } else {
            src.matrix("lm_head.weight", v, h)?
        };
        let layers = (0..cfg.num_hidden_layers)
            .map(|l| build::decoder(cfg, &src, l))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Qwen35Model {
            hidden: h,
            vocab: v,
            eps: cfg.rms_norm_eps as f32,
            embed,
            lm_head,
            final_norm: src.vector("norm.weight", h)?,
            layers,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// A fresh session (empty caches, zero states).
    pub fn new_session(&self) -> Session {
        let layers = self
            .layers
            .iter()
            .map(|d| match &d.mixer {
                Mixer::Full(_) => LayerState::Full(KvCache::default()),
                Mixer::Linear(g) => LayerState::Linear(g.new_state()),
            })
            .collect();
        Session {
            position: 0,
            layers,
        }
    }

    /// Logits `[ids.len()][vocab]` (or the last row, per `opts.logits`) of a
    /// prompt from an empty session.
    pub fn forward_logits(
        &self,
        ids: &[u32],
        opts: &ForwardOptions,
    ) -> Result<Vec<f32>, ModelError> {
        let mut session = self.new_session();
        Ok(self.prefill(&mut session, ids, opts)?.logits)
    }

    /// Runs `ids` after whatever `session` holds, in chunks of `opts.chunk`.
    pub fn prefill(
        &self,
        session: &mut Session,
        ids: &[u32],
        opts: &ForwardOptions,
    ) -> Result<ForwardOutput, ModelError> {
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        if let Some(pos) = ids.iter().position(|&id| id as usize >= self.vocab) {
            return Err(ModelError::TokenOutOfRange {
                id: ids[pos],
                position: session.position + pos,
                vocab: self.vocab,
            });
        }
        let chunk = match opts.chunk {
            Some(0) => return Err(ModelError::ZeroChunk),
            Some(c) => c,
            None => ids.len(),
        };
        // Resolve every route before touching the session.
        let routes = self
            .layers
            .iter()
            .enumerate()
            .map(|(l, d)| match &d.mixer {
                Mixer::Full(att) => {
                    let route = opts.attention.route(l)?;
                    check_route(l, att, route)?;
                    Ok(Some(route))
                }
                Mixer::Linear(_) => Ok(None),
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let mut logits = Vec::new();
        let mut reports = Vec::new();
        let n_chunks = ids.len().div_ceil(chunk);
        for (c, piece) in ids.chunks(chunk).enumerate() {
            let hidden = self.run_chunk(session, piece, &routes, &mut reports)?;
            let rows: &[f32] = match opts.logits {
                LogitsRows::All => &hidden,
                LogitsRows::Last if c + 1 == n_chunks => &hidden[hidden.len() - self.hidden..],
                LogitsRows::Last => continue,
            };
            logits.extend(self.head(rows));
        }
        let rows = logits.len() / self.vocab;
        Ok(ForwardOutput {
            logits,
            rows,
            vocab: self.vocab,
            attention: reports,
        })
    }

    /// One decode step: the logits `[vocab]` of `id` after the session's tokens.
    pub fn decode(
        &self,
        session: &mut Session,
        id: u32,
        route: RouteRequest,
    ) -> Result<Vec<f32>, ModelError> {
        let opts = ForwardOptions {
            attention: AttentionPlan::Uniform(route),
            chunk: None,
            logits: LogitsRows::Last,
        };
        Ok(self.prefill(session, &[id], &opts)?.logits)
    }

    /// Runs one chunk through every layer; returns the final-normed hidden rows.
    fn run_chunk(
        &self,
        session: &mut Session,
        ids: &[u32],
        routes: &[Option<RouteRequest>],
        reports: &mut Vec<LayerAttentionReport>,
    ) -> Result<Vec<f32>, ModelError> {
        let (t, h) = (ids.len(), self.hidden);
        let pos0 = session.position;
        let mut x = vec![0.0f32; t * h];
        for (row, &id) in x.chunks_exact_mut(h).zip(ids) {
            self.embed.read_f32(id as usize * h, row);
        }
        for (l, (dec, state)) in self
            .layers
            .iter()
            .zip(session.layers.iter_mut())
            .enumerate()
        {
            let started = Instant::now();
            let mut normed = x.clone();
            rms_norm_offset(&mut normed, &dec.input_norm, self.eps);
            let mixed = match (&dec.mixer, state) {
                (Mixer::Full(att), LayerState::Full(cache)) => {
                    let route = routes[l].expect("routes resolved for every full layer");
                    let (y, report) = att
                        .forward(&normed, t, pos0, cache, route)
                        .map_err(|source| ModelError::Attention { layer: l, source })?;
                    reports.push(LayerAttentionReport {
                        layer: l,
                        chunk_start: pos0,
                        chunk_len: t,
                        report,
                    });
                    y
                }
                (Mixer::Linear(gdn), LayerState::Linear(st)) => gdn.forward(&normed, t, st),
                _ => unreachable!("session built by this model"),
            };
            add(&mut x, &mixed);
            let mixer_done = Instant::now();
            let mut normed = x.clone();
            rms_norm_offset(&mut normed, &dec.post_norm, self.eps);
            add(&mut x, &dec.mlp.forward(&normed, t));
            tracing::debug!(
                layer = l,
                tokens = t,
                position = pos0,
                mixer_ms = (mixer_done - started).as_secs_f64() * 1e3,
                mlp_ms = mixer_done.elapsed().as_secs_f64() * 1e3,
                "layer forward"
            );
        }
        session.position += t;
        rms_norm_offset(&mut x, &self.final_norm, self.eps);
        Ok(x)
    }

    /// LM head over final hidden rows.
    fn head(&self, rows: &[f32]) -> Vec<f32> {
        let m = rows.len() / self.hidden;
        let mut out = vec![0.0f32; m * self.vocab];
        linear(rows, m, self.lm_head, &mut out);
        out
    }
}

/// Refuses, before any layer runs, a fused route the CPU kernel cannot run
/// for this layer (activations are f32), so a failed call leaves the session as it was.
fn check_route(
    layer: usize,
    att: &FullAttention<'_>,
    route: RouteRequest,
) -> Result<(), ModelError> {
    if route == RouteRequest::Fused {
        let kind = LayerKind {
            attention: AttentionKind::Full,
            head_dim: att.head_dim,
            q_heads: att.heads,
            kv_heads: att.kv_heads,
            dtype: Dtype::F32,
        };
        fused_support(BackendKind::Cpu, &kind).map_err(|reason| ModelError::RouteUnsupported {
            layer,
            route,
            reason,
        })?;
    }
    Ok(())
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
