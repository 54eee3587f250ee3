//! Validation of a [`ModelConfig`]: every size is bounded (so that nothing
//! sized by a config allocates without a limit), the shapes are consistent,
//! and the total parameter count is computed with checked arithmetic.

use super::error::ConfigError;
use super::types::{MlpConfig, ModelConfig};

/// Upper bounds on the sizes a config may give. They are far above any
/// model of the family (Qwen3.6-35B-A3B: 40 layers, hidden 2048, vocab
/// 248,320, 256 experts, context 262,144) and low enough that a hostile
/// config cannot ask for an allocation that overflows or exhausts memory
/// before the weights are checked.
pub mod limits {
    /// `num_hidden_layers` (and `layer_types` entries).
    pub const MAX_LAYERS: usize = 1024;
    /// `vocab_size`.
    pub const MAX_VOCAB: usize = 1 << 24;
    /// `hidden_size`, `*_intermediate_size`.
    pub const MAX_WIDTH: usize = 1 << 18;
    /// Head counts (attention, key/value, linear).
    pub const MAX_HEADS: usize = 1024;
    /// Head dims (attention and linear).
    pub const MAX_HEAD_DIM: usize = 1024;
    /// `linear_conv_kernel_dim`.
    pub const MAX_CONV_KERNEL: usize = 64;
    /// `num_experts`.
    pub const MAX_EXPERTS: usize = 4096;
    /// `max_position_embeddings`.
    pub const MAX_POSITIONS: usize = 1 << 24;
    /// Total parameters (about 4.4 T).
    pub const MAX_PARAMETERS: u64 = 1 << 42;
}

/// Checks that `value` of `field` is in `1..=max`.
pub(crate) fn check_size(field: &str, value: usize, max: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::invalid(field, "must be at least 1"));
    }
    if value > max {
        return Err(ConfigError::invalid(
            field,
            format!("{value} is above the limit of {max}"),
        ));
    }
    Ok(())
}

impl ModelConfig {
    /// Checks the bounds and the internal consistency of the sizes (head
    /// divisibility, rotary dims, parameter count, ...).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_bounds()?;
        self.check_consistency()?;
        match self.parameter_count() {
            Some(n) if n <= limits::MAX_PARAMETERS => Ok(()),
            n => Err(ConfigError::invalid(
                "num_hidden_layers",
                format!(
                    "the sizes give {} parameters, above the limit of {}",
                    n.map_or("more than 2^64".to_string(), |n| n.to_string()),
                    limits::MAX_PARAMETERS
                ),
            )),
        }
    }

    /// Every size in `1..=` its limit ([`limits`]).
    fn check_bounds(&self) -> Result<(), ConfigError> {
        use limits::*;
        let mut sizes = vec![
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("hidden_size", self.hidden_size, MAX_WIDTH),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HEADS),
            ("num_key_value_heads", self.num_key_value_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEAD_DIM),
            ("linear_num_key_heads", self.linear.num_key_heads, MAX_HEADS),
            (
                "linear_num_value_heads",
                self.linear.num_value_heads,
                MAX_HEADS,
            ),
            (
                "linear_key_head_dim",
                self.linear.key_head_dim,
                MAX_HEAD_DIM,
            ),
            (
                "linear_value_head_dim",
                self.linear.value_head_dim,
                MAX_HEAD_DIM,
            ),
            (
                "linear_conv_kernel_dim",
                self.linear.conv_kernel_dim,
                MAX_CONV_KERNEL,
            ),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                MAX_POSITIONS,
            ),
        ];
        match &self.mlp {
            MlpConfig::Moe(m) => sizes.extend([
                ("num_experts", m.num_experts, MAX_EXPERTS),
                ("num_experts_per_tok", m.num_experts_per_tok, MAX_EXPERTS),
                ("moe_intermediate_size", m.moe_intermediate_size, MAX_WIDTH),
                (
                    "shared_expert_intermediate_size",
                    m.shared_expert_intermediate_size,
                    MAX_WIDTH,
                ),
            ]),
            MlpConfig::Dense { intermediate_size } => {
                sizes.push(("intermediate_size", *intermediate_size, MAX_WIDTH))
            }
        }
        for (field, value, max) in sizes {
            check_size(field, value, max)?;
        }
        Ok(())
    }

    /// The sizes agree: one layer type per layer, head counts that divide,
    /// rotary dims within the head, finite positive constants, top-k within
    /// the experts.
    fn check_consistency(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, reason: String| Err(ConfigError::invalid(field, reason));
        if self.layer_types.len() != self.num_hidden_layers {
            return bad(
                "layer_types",
                format!(
                    "has {} entries but num_hidden_layers is {}",
                    self.layer_types.len(),
                    self.num_hidden_layers
                ),
            );
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            );
        }
        if !self
            .linear
            .num_value_heads
            .is_multiple_of(self.linear.num_key_heads)
        {
            return bad(
                "linear_num_key_heads",
                format!(
                    "{} does not divide linear_num_value_heads {}",
                    self.linear.num_key_heads, self.linear.num_value_heads
                ),
            );
        }
        if self.rope.rotary_dim == 0
            || self.rope.rotary_dim > self.head_dim
            || !self.rope.rotary_dim.is_multiple_of(2)
        {
            return bad(
                "partial_rotary_factor",
                format!(
                    "{} gives {} rotary dims of head_dim {} (need an even number in 2..=head_dim)",
                    self.rope.partial_rotary_factor, self.rope.rotary_dim, self.head_dim
                ),
            );
        }
        if !(self.rope.theta.is_finite() && self.rope.theta > 0.0) {
            return bad("rope_theta", format!("{} is not positive", self.rope.theta));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return bad(
                "rms_norm_eps",
                format!("{} is not valid", self.rms_norm_eps),
            );
        }
        if let Some(m) = self.moe() {
            if m.num_experts_per_tok > m.num_experts {
                return bad(
                    "num_experts_per_tok",
                    format!("{} not in 1..={}", m.num_experts_per_tok, m.num_experts),
                );
            }
        }
        Ok(())
    }

    /// Parameters of the text model (embeddings, every layer, final norm, head),
    /// with checked arithmetic: `None` on overflow.
    pub fn parameter_count(&self) -> Option<u64> {
        let u = |x: usize| x as u64;
        let mul = |a: u64, b: u64| a.checked_mul(b);
        let h = u(self.hidden_size);
        let embed = mul(u(self.vocab_size), h)?;
        let head = if self.tie_word_embeddings { 0 } else { embed };
        let q_out = mul(
            mul(u(self.num_attention_heads), u(self.head_dim))?,
            if self.attn_output_gate { 2 } else { 1 },
        )?;
        let kv_out = mul(mul(u(self.num_key_value_heads), u(self.head_dim))?, 2)?;
        let o_in = mul(u(self.num_attention_heads), u(self.head_dim))?;
        let full = mul(h, q_out.checked_add(kv_out)?.checked_add(o_in)?)?;
        let l = &self.linear;
        let key = mul(u(l.num_key_heads), u(l.key_head_dim))?;
        let value = mul(u(l.num_value_heads), u(l.value_head_dim))?;
        let conv = mul(key, 2)?.checked_add(value)?;
        let proj = conv
            .checked_add(value)?
            .checked_add(mul(u(l.num_value_heads), 2)?)?;
        let linear = mul(h, proj)?
            .checked_add(mul(conv, u(l.conv_kernel_dim))?)?
            .checked_add(mul(value, h)?)?;
        let mlp = match &self.mlp {
            MlpConfig::Moe(m) => {
                let expert = mul(mul(h, u(m.moe_intermediate_size))?, 3)?;
                mul(expert, u(m.num_experts))?
                    .checked_add(mul(mul(h, u(m.shared_expert_intermediate_size))?, 3)?)?
                    .checked_add(mul(h, u(m.num_experts))?)?
            }
            MlpConfig::Dense { intermediate_size } => mul(mul(h, u(*intermediate_size))?, 3)?,
        };
        let full_layers = u(self.full_attention_layers().len());
        let linear_layers = u(self.layer_types.len()).checked_sub(full_layers)?;
        let layers = mul(full_layers, full)?
            .checked_add(mul(linear_layers, linear)?)?
            .checked_add(mul(
                u(self.layer_types.len()),
                mlp.checked_add(mul(h, 2)?)?,
            )?)?;
        embed.checked_add(head)?.checked_add(layers)?.checked_add(h)
    }

    /// Bytes of the weights in the storage dtype (`None` on overflow).
    pub fn weight_bytes(&self) -> Option<u64> {
        self.parameter_count()?
            .checked_mul(self.dtype.size_bytes() as u64)
    }
}
