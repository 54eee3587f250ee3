//! `headroom kernels build|verify`: the kernel artifact gate.

use crate::global::GlobalArgs;

#[derive(clap::Subcommand, Debug)]
pub enum KernelsCommand {
    /// Compile every kernel through NVRTC and write the artifact + manifest.json.
    Build {},
    /// Verify an artifact folder against the sources embedded in this binary.
    Verify {},
}

pub fn run(_c: KernelsCommand, _g: &GlobalArgs) -> anyhow::Result<()> {
    anyhow::bail!("kernels: not built yet")
}
