//! The kernel sources of the FP8 ops (`crate::kernels::SOURCES` lists them).

use crate::kernels::source::KernelSource;

/// Block-scaled FP8 GEMV over up to 6 matrices in one launch: one output
/// or two (`c2_r1`, wide launches) per warp at one row, two at 2 ..= 8
/// rows (`c2`); and its
/// batched-experts variant (`fp8_gemv_experts`).
pub const FP8_GEMV: KernelSource = KernelSource {
    name: "fp8_gemv",
    file: "fp8_gemv.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../../kernels/e4m3.cuh"),
        "#define HEADROOM_GEMV_NS headroom_fp8_gemv\n",
        include_str!("../gemv/gemv_body.cuh"),
        include_str!("fp8_gemv.cu")
    ),
    entry_points: &[
        "fp8_gemv_c1_r1",
        "fp8_gemv_c2_r1",
        "fp8_gemv_c2_r2",
        "fp8_gemv_c2_r3",
        "fp8_gemv_c2_r4",
        "fp8_gemv_c2_r5",
        "fp8_gemv_c2_r6",
        "fp8_gemv_c2_r7",
        "fp8_gemv_c2_r8",
        "fp8_gemv_experts",
    ],
};

/// Activation quantization to e4m3 per (row, 128 columns), weight
/// dequantization to bf16, and the f32 transpose of scale tables.
pub const FP8_QUANT: KernelSource = KernelSource {
    name: "fp8_quant",
    file: "fp8_quant.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../../kernels/e4m3_quant.cuh"),
        include_str!("fp8_quant.cu")
    ),
    entry_points: &[
        "fp8_quant_bf16",
        "fp8_quant_bf16_v16",
        "fp8_dequant_bf16",
        "fp8_transpose_f32",
    ],
};

/// The MoE decode's glue on FP8 experts: routing (softmax + top-k per
/// row), SwiGLU of the experts' gate/up outputs, and the weighted combine
/// with the gated shared expert.
pub const FP8_MOE: KernelSource = KernelSource {
    name: "fp8_moe",
    file: "fp8_moe.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("fp8_moe.cu")
    ),
    entry_points: &["fp8_moe_route", "fp8_moe_swiglu", "fp8_moe_combine"],
};
