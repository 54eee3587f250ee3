//! `headroom logits`: prefill and write logits.

use crate::global::GlobalArgs;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args, _g: &GlobalArgs) -> anyhow::Result<()> {
    anyhow::bail!("logits: not built yet")
}
