//! `headroom bench ...`: benchmark subcommands.

use crate::global::GlobalArgs;

#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Prefill attention A/B over routes on one backend.
    Attention(AttentionArgs),
}

#[derive(clap::Args, Debug)]
pub struct AttentionArgs {}

pub fn run(_c: BenchCommand, _g: &GlobalArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench: not built yet")
}
