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
    /// The shape of `len` query rows after `history` KV rows (default scale).
    pub fn shape(&self, len: usize) -> AttentionShape {
        AttentionShape {
            q_len: len,
            kv_len: len + self.history,
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: None,
        }
    }
}
