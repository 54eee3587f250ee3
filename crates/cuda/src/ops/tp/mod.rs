//! Tensor-parallel partials in f32 (`tp.cu`): the MoE combine of one rank
//! (launched by the backend's `moe_partial`) and the one rounding of a
//! reduced sum (launched by the backend's all-reduce).

use crate::kernels::KernelSource;

/// `out = routed + sigmoid(gate) · shared` in f32 over one rank's rows.
pub const MOE_COMBINE_PARTIAL: &str = "moe_combine_partial_f32";
/// An f32 sum rounded once to bf16.
pub const ROUND_F32_TO_BF16: &str = "round_f32_to_bf16";

/// The tensor-parallel partial kernels.
pub const OPS_TP: KernelSource = KernelSource {
    name: "ops_tp",
    file: "tp.cu",
    source: include_str!("tp.cu"),
    entry_points: &[MOE_COMBINE_PARTIAL, ROUND_F32_TO_BF16],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_names_are_the_kernels_own() {
        for e in OPS_TP.entry_points {
            assert!(
                OPS_TP
                    .source
                    .contains(&format!("extern \"C\" __global__ void {e}(")),
                "{e}"
            );
        }
    }
}
