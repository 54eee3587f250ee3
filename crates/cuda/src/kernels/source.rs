//! [`KernelSource`]: one `.cu` source embedded in the binary, compiled as one
//! NVRTC program, with the entry points its cubin must export. Each op
//! folder under `crate::ops` declares its own; `crate::kernels` lists them all.

/// One `.cu` source compiled as one NVRTC program (one cubin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// Short name, also the NVRTC program name and the artifact file stem.
    pub name: &'static str,
    /// File name of the source (beside the module that declares it).
    pub file: &'static str,
    pub source: &'static str,
    /// Entry points the compiled output must export.
    pub entry_points: &'static [&'static str],
}

impl KernelSource {
    /// The architecture the source needs, when it uses instructions only one
    /// target has (`wgmma` exists on `sm_90a` alone).
    pub fn required_arch(&self) -> Option<&'static str> {
        self.source.contains("wgmma.").then_some("sm_90a")
    }

    /// Whether the source compiles for `arch`.
    pub fn builds_for(&self, arch: &str) -> bool {
        self.required_arch().is_none_or(|a| a == arch)
    }
}

/// The integer literal of `constexpr int NAME = <int>;` in a kernel source
/// (the tests that keep launch constants equal to the kernels' own).
#[cfg(test)]
pub(crate) fn source_constant(src: &str, name: &str) -> usize {
    let pat = format!("constexpr int {name} = ");
    let at = src
        .find(&pat)
        .unwrap_or_else(|| panic!("{name} not in source"))
        + pat.len();
    let lit: String = src[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    lit.parse()
        .unwrap_or_else(|_| panic!("{name} is not a literal"))
}
