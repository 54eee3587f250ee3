//! The kernel source of the one-launch range copies
//! (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// Byte-range copies within device memory, many ranges a launch.
pub const STATE_COPY: KernelSource = KernelSource {
    name: "state_copy",
    file: "state_copy.cu",
    source: include_str!("state_copy.cu"),
    entry_points: &["copy_ranges"],
};
