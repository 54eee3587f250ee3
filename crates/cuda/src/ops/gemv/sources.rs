//! The kernel source of the skinny GEMV (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// Skinny bf16 GEMV over up to 6 matrices in one launch: one output per warp
/// at one row (`c1`), two at 2 ..= 8 rows (`c2`).
pub const GEMV: KernelSource = KernelSource {
    name: "gemv",
    file: "gemv.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        "#define HEADROOM_GEMV_NS headroom_gemv\n",
        include_str!("gemv_body.cuh"),
        include_str!("gemv.cu")
    ),
    entry_points: &[
        "gemv_c1_r1",
        "gemv_c2_r2",
        "gemv_c2_r3",
        "gemv_c2_r4",
        "gemv_c2_r5",
        "gemv_c2_r6",
        "gemv_c2_r7",
        "gemv_c2_r8",
    ],
};
