//! The Qwen3.5 / Qwen3.6 forward, written once against the backend op set:
//! embeddings → decoder layers (zero-centred RMSNorm → Gated DeltaNet or
//! gated full attention → residual → RMSNorm → MoE or dense MLP → residual)
//! → final norm → LM head (tied to the embeddings or not).
//!
//! [`Qwen35Model::step`] runs one packed batch of rows of several sequences
//! (a `Batch`: cu_seqlens, state slots, history) against a [`ModelState`]
//! — what the engine drives. [`Qwen35Model::prefill`] / [`Qwen35Model::decode`]
//! serve one sequence held in a [`Session`], in chunks of any size: a prompt
//! prefilled in chunks gives the same logits as one pass.

mod build;
mod checks;
mod layer_pass;
mod options;
mod sources;
mod state;

pub use options::{
    AttentionPlan, ForwardOptions, ForwardOutput, LayerAttentionReport, LogitsRows, ModelError,
};
pub use state::{LayerState, ModelState, Session};

use crate::config::ModelConfig;
use crate::layers::{FullAttention, GatedDeltaNet, LayerOut, Mlp};
use crate::parallel::RankShard;
use crate::profile::{Part, PartTime, ProfileMode, Profiler};
use crate::step_model::StepIds;
use crate::Weights;
use headroom_core::ops::{Backend, Batch, GdnSpec, KvSpec, OpKey, StepKey};
use headroom_core::{progress, AttentionKind, LayerKind, OpError, RouteRequest};
use sources::{HostSource, InitSource, Store, WeightSource};
use std::time::Instant;

/// Token capacity of [`Qwen35Model::new_session`].
pub const DEFAULT_SESSION_CAPACITY: usize = 1 << 20;

/// The token mixer of one decoder layer.
pub(crate) enum Mixer<B: Backend> {
    Full(FullAttention<B>),
    Linear(GatedDeltaNet<B>),
}

pub(crate) struct Decoder<B: Backend> {
    input_norm: B::Weight,
    post_norm: B::Weight,
    mixer: Mixer<B>,
    mlp: Mlp<B>,
}

/// What one [`Qwen35Model::step`] produced.
pub struct StepOutput<B: Backend> {
    /// Logits of the selected rows, `[rows][vocab]`, on the backend
    /// (`None` for [`LogitsRows::None`]).
    pub logits: Option<B::Act>,
    /// Every attention call's report (one per full-attention layer).
    pub attention: Vec<LayerAttentionReport>,
}

/// A Qwen3.5-family text model whose weights live on backend `B`.
pub struct Qwen35Model<B: Backend> {
    backend: B,
    cfg: ModelConfig,
    embed: B::Weight,
    /// `None`: tied to the embeddings.
    lm_head: Option<B::Weight>,
    /// The part of the model this backend holds (all of it outside tensor
    /// parallelism); with a vocab split, the LM head's logits are gathered.
    shard: RankShard,
    final_norm: B::Weight,
    layers: Vec<Decoder<B>>,
    profiler: Profiler,
}

impl<B: Backend> std::fmt::Debug for Qwen35Model<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qwen35Model")
            .field("backend", &self.backend.kind())
            .field("model_type", &self.cfg.model_type)
            .field("layers", &self.layers.len())
            .finish()
    }
}

impl<B: Backend> Qwen35Model<B> {
    /// Builds the model on `backend` from its config (validated first) and a
    /// checkpoint's canonical weights, which it consumes tensor by tensor;
    /// every tensor is checked for presence and shape against the schema.
    pub fn load(backend: B, cfg: &ModelConfig, weights: Weights) -> Result<Self, ModelError> {
        let mut src = HostSource::new(cfg, Store::Owned(weights));
        Self::build(backend, cfg, &mut src, RankShard::whole(cfg))
    }

    /// Builds the model with synthetic weights drawn on the backend's device
    /// from `seed` (matrices N(0, 0.02); norms and gates as `Weights::synthetic`).
    pub fn synthetic(backend: B, cfg: &ModelConfig, seed: u64) -> Result<Self, ModelError> {
        let mut src = InitSource::new(cfg, seed);
        Self::build(backend, cfg, &mut src, RankShard::whole(cfg))
    }

    /// One tensor-parallel rank: the shard `shard` of a checkpoint's
    /// weights (borrowed: the ranks of a group share one host copy and each
    /// uploads only its slices).
    pub fn load_shard(
        backend: B,
        cfg: &ModelConfig,
        weights: &Weights,
        shard: RankShard,
    ) -> Result<Self, ModelError> {
        let mut src = HostSource::new(cfg, Store::Shared(weights));
        Self::build(backend, cfg, &mut src, shard)
    }

    /// One tensor-parallel rank with synthetic weights: each matrix is the
    /// shard's window of the draw [`Self::synthetic`] makes, so the group
    /// computes the same model.
    pub fn synthetic_shard(
        backend: B,
        cfg: &ModelConfig,
        seed: u64,
        shard: RankShard,
    ) -> Result<Self, ModelError> {
        let mut src = InitSource::new(cfg, seed);
        Self::build(backend, cfg, &mut src, shard)
    }

    fn build(
        backend: B,
        cfg: &ModelConfig,
        src: &mut dyn WeightSource<B>,
        shard: RankShard,
    ) -> Result<Self, ModelError> {
        cfg.validate()?;
        if shard.world != backend.world_size() {
            return Err(ModelError::Unsupported(format!(
                "a shard of a {}-rank plan on a backend in a group of {}",
                shard.world,
                backend.world_size()
            )));
        }
        let embed = src.matrix(&backend, "embed_tokens.weight")?;
        let head_name = if cfg.tie_word_embeddings {
            "embed_tokens.weight"
        } else {
            "lm_head.weight"
        };
        let lm_head = match (&shard.vocab, cfg.tie_word_embeddings) {
            (None, true) => None,
            (None, false) => Some(src.matrix(&backend, head_name)?),
            (Some(rows), _) => Some(src.matrix_part(
                &backend,
                head_name,
                Some(std::slice::from_ref(rows)),
                None,
            )?),
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        // Drawing or uploading the layers is the long part: one progress
        // event per layer (`headroom_core::progress`).
        let (task, message) = src.progress();
        let total = cfg.num_hidden_layers as u64;
        progress::report(task, 0, total, "layers", message);
        for l in 0..cfg.num_hidden_layers {
            layers.push(build::decoder(&backend, cfg, src, l, &shard)?);
            progress::report(task, l as u64 + 1, total, "layers", message);
        }
        let final_norm = src.vector(&backend, "norm.weight")?;
        Ok(Qwen35Model {
            backend,
            cfg: cfg.clone(),
            embed,
            lm_head,
            shard,
            final_norm,
            layers,
            profiler: Profiler::default(),
        })
    }

    /// The part of the model this backend holds.
    pub fn shard(&self) -> &RankShard {
        &self.shard
    }

    /// Turns the per-part time breakdown on or off, and says how it times
    /// its parts (see [`crate::profile`]).
    pub fn set_profile_mode(&self, mode: ProfileMode) {
        self.profiler.set_mode(mode);
    }

    /// The per-part times since the last call (empty unless profiling is
    /// on; queued parts are read here, waiting for the device).
    pub fn take_profile(&self) -> Vec<PartTime> {
        self.profiler.take(&self.backend)
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    pub fn vocab_size(&self) -> usize {
        self.cfg.vocab_size
    }

    /// The layer kind of every full-attention layer as this backend runs it
    /// (dtype: the backend's activation dtype).
    pub fn attention_kinds(&self) -> Vec<(usize, LayerKind)> {
        self.layers
            .iter()
            .enumerate()
            .filter_map(|(l, d)| match &d.mixer {
                Mixer::Full(a) => Some((
                    l,
                    LayerKind {
                        attention: AttentionKind::Full,
                        head_dim: a.head_dim,
                        q_heads: a.heads,
                        kv_heads: a.kv_heads,
                        dtype: self.backend.act_dtype(),
                    },
                )),
                Mixer::Linear(_) => None,
            })
            .collect()
    }

    /// Fresh state pools for `slots` sequences of up to `capacity` tokens
    /// each, every slot's KV blocks reserved (the identity layout: batches
    /// need no block tables).
    pub fn new_state(&self, slots: usize, capacity: usize) -> Result<ModelState<B>, ModelError> {
        self.new_paged_state(slots, capacity, None)
    }

    /// Fresh state pools for `slots` sequences of up to `capacity` tokens
    /// each, every full-attention layer's KV a pool of `kv_blocks` blocks
    /// shared through the batches' block tables (`None`: the identity
    /// layout of [`Self::new_state`]).
    pub fn new_paged_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<ModelState<B>, ModelError> {
        let be = &self.backend;
        let layers = self
            .layers
            .iter()
            .map(|d| match &d.mixer {
                Mixer::Full(a) => {
                    let mut spec = KvSpec::contiguous(slots, a.kv_heads, a.head_dim, capacity);
                    if let Some(blocks) = kv_blocks {
                        spec.blocks = blocks;
                    }
                    be.new_kv_cache(&spec).map(LayerState::Full)
                }
                Mixer::Linear(g) => be
                    .new_gdn_state(&GdnSpec { slots, ..g.spec })
                    .map(LayerState::Linear),
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(ModelError::op)?;
        Ok(ModelState {
            layers,
            slots,
            capacity,
        })
    }

    /// A fresh single-sequence session of up to [`DEFAULT_SESSION_CAPACITY`]
    /// tokens (the CPU grows its caches lazily; a backend that allocates the
    /// capacity up front is better served by [`Self::new_session_with_capacity`]).
    pub fn new_session(&self) -> Result<Session<B>, ModelError> {
        self.new_session_with_capacity(DEFAULT_SESSION_CAPACITY)
    }

    /// A fresh single-sequence session holding up to `capacity` tokens.
    pub fn new_session_with_capacity(&self, capacity: usize) -> Result<Session<B>, ModelError> {
        Ok(Session {
            position: 0,
            state: self.new_state(1, capacity)?,
        })
    }

    /// Resolves the route of every full-attention layer and checks the
    /// backend runs it, before any state is touched.
    pub fn routes(&self, plan: &AttentionPlan) -> Result<Vec<Option<RouteRequest>>, ModelError> {
        let kinds = self.attention_kinds();
        self.layers
            .iter()
            .enumerate()
            .map(|(l, d)| match &d.mixer {
                Mixer::Full(_) => {
                    let route = plan.route(l)?;
                    let layer = kinds
                        .iter()
                        .find(|(i, _)| *i == l)
                        .map(|(_, k)| *k)
                        .expect("every full layer has a kind");
                    self.backend
                        .supports(&OpKey::Attention { route, layer })
                        .map_err(|reason| ModelError::RouteUnsupported {
                            layer: l,
                            route,
                            reason,
                        })?;
                    Ok(Some(route))
                }
                Mixer::Linear(_) => Ok(None),
            })
            .collect()
    }

    /// Logits `[ids.len()][vocab]` (or the last row, per `opts.logits`) of a
    /// prompt from an empty session.
    pub fn forward_logits(
        &self,
        ids: &[u32],
        opts: &ForwardOptions,
    ) -> Result<Vec<f32>, ModelError> {
        let mut session = self.new_session_with_capacity(ids.len().max(1))?;
        Ok(self.prefill(&mut session, ids, opts)?.logits)
    }

    /// Runs `ids` after whatever `session` holds, in chunks of `opts.chunk`;
    /// logits come back to the host as f32.
    pub fn prefill(
        &self,
        session: &mut Session<B>,
        ids: &[u32],
        opts: &ForwardOptions,
    ) -> Result<ForwardOutput, ModelError> {
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        self.check_ids(ids, session.position)?;
        let chunk = match opts.chunk {
            Some(0) => return Err(ModelError::ZeroChunk),
            Some(c) => c,
            None => ids.len(),
        };
        let capacity = session.state.capacity;
        if session.position + ids.len() > capacity {
            return Err(ModelError::ContextFull {
                have: session.position,
                adding: ids.len(),
                capacity,
            });
        }
        let routes = self.routes(&opts.attention)?;
        let mut logits = Vec::new();
        let mut reports = Vec::new();
        let n_chunks = ids.len().div_ceil(chunk);
        for (c, piece) in ids.chunks(chunk).enumerate() {
            let batch = Batch::single(0, session.position, piece.len());
            let rows = match opts.logits {
                LogitsRows::All => LogitsRows::All,
                LogitsRows::None => LogitsRows::None,
                LogitsRows::Last if c + 1 == n_chunks => LogitsRows::Last,
                LogitsRows::Last => LogitsRows::None,
            };
            let out = self.step(&mut session.state, piece, &batch, &routes, rows)?;
            session.position += piece.len();
            reports.extend(out.attention);
            if let Some(l) = &out.logits {
                logits.extend(self.backend.act_to_f32(l).map_err(op(None))?);
            }
        }
        let rows = logits.len() / self.cfg.vocab_size;
        Ok(ForwardOutput {
            logits,
            rows,
            vocab: self.cfg.vocab_size,
            attention: reports,
        })
    }

    /// One decode step: the logits `[vocab]` of `id` after the session's tokens.
    pub fn decode(
        &self,
        session: &mut Session<B>,
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

    /// Runs one packed batch (`ids` are the batch's rows) through every
    /// layer against `state`, with `routes` from [`Qwen35Model::routes`];
    /// returns the logits of the selected rows on the device. A batch whose
    /// description disagrees with the state (slot lengths, capacity) is
    /// refused before any layer runs.
    pub fn step(
        &self,
        state: &mut ModelState<B>,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        self.step_drawn(state, StepIds::known(ids), batch, routes, rows)
    }

    /// [`Self::step`] whose inputs may take tokens a previous step drew on
    /// the backend and the host has not read yet ([`StepIds`]): the
    /// embedding reads them where they were drawn (`Backend::embed_drawn`).
    pub fn step_drawn(
        &self,
        state: &mut ModelState<B>,
        ids: StepIds<'_, B::Drawn>,
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        self.check_step(state, ids.ids, batch, routes)?;
        // A decode step (one row a sequence) may be recorded and launched as
        // one unit (`Backend::queue_step`: a CUDA graph); a prefill's shapes
        // differ every step, and the profiler waits for the device between parts.
        if batch.rows() == batch.sequences() && !self.profiler.enabled() {
            let key = StepKey {
                rows: batch.rows(),
                sequences: batch.sequences(),
                drawn_ids: ids.drawn.is_some(),
            };
            return self
                .backend
                .queue_step(key, || self.queue_step(state, ids, batch, routes, rows))
                .map_err(op(None))?;
        }
        self.queue_step(state, ids, batch, routes, rows)
    }

    /// The work of [`Self::step_drawn`] after its checks: every launch of
    /// the step, queued in order.
    fn queue_step(
        &self,
        state: &mut ModelState<B>,
        ids: StepIds<'_, B::Drawn>,
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        let be = &self.backend;
        let mut x = self
            .profiler
            .time(be, Part::Embed, || match ids.drawn {
                Some((holes, drawn)) => be.embed_drawn(&self.embed, ids.ids, holes, drawn),
                None => be.embed(&self.embed, ids.ids),
            })
            .map_err(op(None))?;
        let mut reports = Vec::new();
        let mut carry: Option<LayerOut<B::Act>> = None;
        for (l, (dec, layer_state)) in self.layers.iter().zip(state.layers.iter_mut()).enumerate() {
            let started = Instant::now();
            let out = self.decoder_layer(
                l,
                dec,
                layer_state,
                &mut x,
                carry.take(),
                batch,
                routes,
                &mut reports,
            )?;
            carry = Some(out);
            tracing::trace!(
                layer = l,
                rows = batch.rows(),
                ms = started.elapsed().as_secs_f64() * 1e3,
                "layer queued"
            );
        }
        let pending = match carry {
            None => None,
            Some(LayerOut::Delta(d)) => Some(d),
            // The last layer is given no next norm (the final norm is the head's).
            Some(LayerOut::Normed(_)) => {
                return Err(ModelError::Unsupported(
                    "the last layer took a next norm".into(),
                ))
            }
        };
        let logits = self.head(&mut x, pending.as_ref(), batch, rows)?;
        Ok(StepOutput {
            logits,
            attention: reports,
        })
    }
}

/// Wraps an op error with the layer it happened in.
fn op(layer: Option<usize>) -> impl Fn(OpError) -> ModelError {
    move |source| match source {
        OpError::Attention(source) if layer.is_some() => ModelError::Attention {
            layer: layer.unwrap_or(0),
            source,
        },
        source => ModelError::Op { layer, source },
    }
}
