//! `--head-dim --q-heads --kv-heads --history`: the attention shape options
//! that `bench attention` and `kernels time` share. The defaults are the
//! Qwen3.6 full-attention layer (D=256, 16 query heads, 2 KV heads).

use clap::Args;
use headroom_core::AttentionShape;

#[derive(Args, Debug, Clone, Copy)]
pub struct ShapeArgs {
    /// Head dim.
    #[arg(long, default_value_t = 256)]
    pub head_dim: usize,
    /// Query heads.
    #[arg(long, default_value_t = 16)]
    pub q_heads: usize,
    /// KV heads.
    #[arg(long, default_value_t = 2)]
    pub kv_heads: usize,
    /// KV rows before the queries (earlier chunks).
    #[arg(long, default_value_t = 0)]
    pub history: usize,
}

impl ShapeArgs {
    /// [`ShapeArgs::shape`] after checking every size: in range, no overflow
    /// of `length + history`, and the shape valid; errors name the flag.
    pub fn checked_shape(&self, len: usize) -> anyhow::Result<AttentionShape> {
        use headroom_bench::attention::{MAX_HEADS, MAX_HEAD_DIM};
        anyhow::ensure!(
            (1..=MAX_HEAD_DIM).contains(&self.head_dim),
            "--head-dim {} is not in 1..={MAX_HEAD_DIM}",
            self.head_dim
        );
        for (flag, v) in [("--q-heads", self.q_heads), ("--kv-heads", self.kv_heads)] {
            anyhow::ensure!(
                (1..=MAX_HEADS).contains(&v),
                "{flag} {v} is not in 1..={MAX_HEADS}"
            );
        }
        anyhow::ensure!(
            len.checked_add(self.history).is_some(),
            "--history {} plus length {len} overflows",
            self.history
        );
        let shape = self.shape(len);
        shape
            .validate()
            .map_err(|e| anyhow::anyhow!("length {len}: {e}"))?;
        Ok(shape)
    }

    /// The shape of `len` query rows after `history` KV rows (default scale).
    pub fn shape(&self, len: usize) -> AttentionShape {
        AttentionShape {
            q_len: len,
            kv_len: len.saturating_add(self.history),
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: None,
        }
    }
}
