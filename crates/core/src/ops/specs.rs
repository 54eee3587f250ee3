//! Plain descriptions the ops take: state pool shapes, RoPE, MoE, sampling,
//! synthetic weight draws, and the keys [`super::Backend::supports`] answers.

use crate::{LayerKind, RouteRequest};
use serde::{Deserialize, Serialize};

/// Shape of one full-attention layer's KV cache pool: `blocks` blocks of
/// [`super::KV_BLOCK_ROWS`] rows (see [`super::blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpec {
    /// Sequences the pool serves at once (state slots).
    pub slots: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Most tokens one sequence may hold.
    pub capacity: usize,
    /// Blocks in the pool ([`KvSpec::contiguous`]: every slot's capacity).
    pub blocks: usize,
}

/// Shape of one Gated DeltaNet layer's state pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GdnSpec {
    pub slots: usize,
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
    /// Conv kernel width (the conv state keeps `kernel - 1` rows).
    pub kernel: usize,
}

impl GdnSpec {
    /// Channels of the conv (q, k and v concatenated).
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }

    /// Elements of one slot's recurrent state `[v_heads][k_dim][v_dim]`.
    pub fn recurrent_len(&self) -> usize {
        self.v_heads * self.k_dim * self.v_dim
    }

    /// Elements of one slot's conv state `[kernel - 1][conv_dim]`.
    pub fn conv_len(&self) -> usize {
        (self.kernel - 1) * self.conv_dim()
    }
}

/// Partial rotary embedding: the first `rotary_dim` dims of each head rotate
/// with `inv_freq[i] = theta^(-2i / rotary_dim)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    pub rotary_dim: usize,
    pub theta: f64,
}

/// Shape of a sparse MoE block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    pub num_experts: usize,
    pub top_k: usize,
    /// Per-expert intermediate size `I`.
    pub intermediate: usize,
    pub renormalise: bool,
    /// The experts whose weights this backend holds: `first_expert ..
    /// first_expert + local_experts` (all of them, `0..num_experts`, unless
    /// the experts are split over tensor-parallel ranks). Routing is always
    /// over all `num_experts`; a token's pairs with other experts contribute
    /// nothing here (their rank adds them in the all-reduce).
    pub first_expert: usize,
    pub local_experts: usize,
    /// Whether this backend adds the shared expert: always outside a group;
    /// inside one, only the rank that holds the shared expert whole (the
    /// others hold a one-row stand-in, never read). Held whole, its output is
    /// rounded where one GPU rounds it, so a group's sum equals the
    /// unsplit block up to f32 summation order (`docs/parallel.md`).
    pub shared_expert: bool,
}

impl MoeSpec {
    /// A block holding all of its experts.
    pub fn all_experts(
        num_experts: usize,
        top_k: usize,
        intermediate: usize,
        renormalise: bool,
    ) -> MoeSpec {
        MoeSpec {
            num_experts,
            top_k,
            intermediate,
            renormalise,
            first_expert: 0,
            local_experts: num_experts,
            shared_expert: true,
        }
    }

    /// `Err` unless the local experts lie inside `0..num_experts` and are not empty.
    pub fn check_local(&self) -> Result<(), String> {
        match self.first_expert.checked_add(self.local_experts) {
            Some(end) if self.local_experts > 0 && end <= self.num_experts => Ok(()),
            _ => Err(format!(
                "local experts {}+{} outside 0..{}",
                self.first_expert, self.local_experts, self.num_experts
            )),
        }
    }
}

/// Weights of a sparse MoE block. Expert `e`'s gate and up projections are
/// rows `e·2I .. e·2I+I` and `e·2I+I .. (e+1)·2I` of `gate_up` (`[E·2I][H]`),
/// its down projection rows `e·H .. (e+1)·H` of `down` (`[E·H][I]`).
#[derive(Debug)]
pub struct MoeWeights<W> {
    pub router: W,
    pub gate_up: W,
    pub down: W,
    pub shared_gate_proj: W,
    pub shared_up_proj: W,
    pub shared_down_proj: W,
    /// `[1][H]`: the shared expert's sigmoid gate.
    pub shared_gate: W,
}

/// How one sequence's next token is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// 0 = greedy (argmax, lowest index on ties).
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 keeps every token.
    pub top_p: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps every token.
    pub top_k: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        }
    }
}

/// A synthetic weight draw: `N(mean, std)` from a counter-based stream of `seed`
/// (the same values whatever the device's thread layout).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightInit {
    pub seed: u64,
    pub mean: f32,
    pub std: f32,
    /// `Some`: the drawn matrix is a window of a larger one, each element
    /// drawn at its position there (a rank's shard equals the same rows and
    /// columns of the unsharded draw).
    pub window: Option<InitWindow>,
}

/// Where a drawn `[rows][cols]` matrix sits in the full `[..][full_cols]` one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitWindow {
    pub first_row: u64,
    pub first_col: u64,
    pub full_cols: u64,
}

impl WeightInit {
    /// A draw of a whole matrix.
    pub fn new(seed: u64, mean: f32, std: f32) -> WeightInit {
        WeightInit {
            seed,
            mean,
            std,
            window: None,
        }
    }

    /// The random-stream counter of element `i` (row-major) of a drawn
    /// matrix with `cols` columns: `i`, or its position in the full matrix.
    pub fn counter(&self, i: u64, cols: u64) -> u64 {
        match self.window {
            None => i,
            Some(w) => {
                let (r, c) = (i / cols.max(1), i % cols.max(1));
                (w.first_row + r)
                    .wrapping_mul(w.full_cols)
                    .wrapping_add(w.first_col + c)
            }
        }
    }
}

/// What [`super::Backend::supports`] is asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpKey {
    Embed,
    Linear,
    RmsNorm,
    GatedRmsNorm,
    Rope,
    Conv1dSilu,
    GdnGating,
    GatedDeltaRule {
        k_dim: usize,
        v_dim: usize,
    },
    KvWrite,
    Attention {
        route: RouteRequest,
        layer: LayerKind,
    },
    Moe {
        num_experts: usize,
        top_k: usize,
    },
    Swiglu,
    Sample,
}

impl OpKey {
    pub fn name(&self) -> &'static str {
        match self {
            OpKey::Embed => "embed",
            OpKey::Linear => "linear",
            OpKey::RmsNorm => "rms_norm",
            OpKey::GatedRmsNorm => "gated_rms_norm",
            OpKey::Rope => "rope",
            OpKey::Conv1dSilu => "conv1d_silu",
            OpKey::GdnGating => "gdn_gating",
            OpKey::GatedDeltaRule { .. } => "gated_delta_rule",
            OpKey::KvWrite => "kv_write",
            OpKey::Attention { .. } => "attention",
            OpKey::Moe { .. } => "moe",
            OpKey::Swiglu => "swiglu",
            OpKey::Sample => "sample",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counters_are_the_full_matrix_positions() {
        let full = WeightInit::new(1, 0.0, 1.0);
        assert_eq!(full.counter(17, 5), 17);
        let w = WeightInit {
            window: Some(InitWindow {
                first_row: 2,
                first_col: 3,
                full_cols: 10,
            }),
            ..full
        };
        // A [2][4] window at (2, 3) of a [..][10] matrix.
        let got: Vec<u64> = (0..8).map(|i| w.counter(i, 4)).collect();
        assert_eq!(got, vec![23, 24, 25, 26, 33, 34, 35, 36]);
    }

    #[test]
    fn local_experts_must_lie_inside_the_block() {
        let mut s = MoeSpec::all_experts(8, 2, 16, true);
        assert!(s.check_local().is_ok());
        s.first_expert = 4;
        s.local_experts = 4;
        assert!(s.check_local().is_ok());
        s.local_experts = 5;
        assert!(s.check_local().is_err());
        s.local_experts = 0;
        assert!(s.check_local().is_err());
        s.first_expert = usize::MAX;
        s.local_experts = 2;
        assert!(s.check_local().is_err());
    }
}
