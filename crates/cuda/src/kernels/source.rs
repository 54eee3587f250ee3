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

    /// The oldest SM generation the source compiles for, when it uses PTX
    /// that ptxas refuses below sm_90 ([`SM90_PTX`]; `stmatrix` in the
    /// narrow and wide GDN scans): 90. Without any, `None` (every target).
    pub fn min_sm(&self) -> Option<u32> {
        SM90_PTX
            .iter()
            .any(|ptx| self.source.contains(ptx))
            .then_some(90)
    }

    /// Whether the source compiles for `arch`: its [`Self::required_arch`]
    /// if it has one, and an `sm_XY` target of at least its [`Self::min_sm`].
    pub fn builds_for(&self, arch: &str) -> bool {
        self.required_arch().is_none_or(|a| a == arch)
            && self
                .min_sm()
                .is_none_or(|min| sm_number(arch).is_some_and(|n| n >= min))
    }
}

/// PTX instructions that ptxas refuses below sm_90 ("Feature '…' requires
/// .target sm_90 or higher") and that a source may use outside `wgmma`
/// kernels (which need `sm_90a` anyway).
const SM90_PTX: [&str; 3] = ["stmatrix.", "cp.async.bulk", "setmaxnreg."];

/// The number of an `sm_XY` architecture name (a feature suffix such as `a`
/// ignored): `sm_90a` → 90, `sm_100a` → 100; `None` for anything else.
pub(crate) fn sm_number(arch: &str) -> Option<u32> {
    let digits: String = arch
        .strip_prefix("sm_")?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
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

#[cfg(test)]
mod tests {
    use super::sm_number;
    use crate::ops::gdn::sources::{GDN_CHUNKED, GDN_CHUNK_PREP};

    #[test]
    fn sm_90_ptx_limits_a_source_to_sm_90_and_newer() {
        assert_eq!(GDN_CHUNKED.min_sm(), Some(90));
        assert_eq!(GDN_CHUNKED.required_arch(), None);
        for arch in ["sm_90", "sm_90a", "sm_100a", "sm_120"] {
            assert!(GDN_CHUNKED.builds_for(arch), "{arch}");
        }
        for arch in ["sm_89", "sm_80", "compute_90", "sm_", ""] {
            assert!(!GDN_CHUNKED.builds_for(arch), "{arch:?}");
        }
        // The prep shares gdn_common.cuh with the scan but no stmatrix.
        assert_eq!(GDN_CHUNK_PREP.min_sm(), None);
        assert!(GDN_CHUNK_PREP.builds_for("sm_80"));
    }

    #[test]
    fn sm_number_reads_the_number_of_an_sm_name() {
        assert_eq!(sm_number("sm_90a"), Some(90));
        assert_eq!(sm_number("sm_100a"), Some(100));
        assert_eq!(sm_number("sm_89"), Some(89));
        assert_eq!(sm_number("sm_"), None);
        assert_eq!(sm_number("compute_90"), None);
        assert_eq!(sm_number("gfx90a"), None);
    }
}
