//! `headroom doctor`: fingerprint, backends, registry, resolved attention per layer kind.

use crate::global::GlobalArgs;
use crate::model_source::ModelSource;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub source: ModelSource,
    /// Print exactly one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: Args, _g: &GlobalArgs) -> anyhow::Result<()> {
    anyhow::bail!("doctor: not built yet")
}
