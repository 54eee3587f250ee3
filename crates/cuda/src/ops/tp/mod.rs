//! Tensor-parallel partials in f32 (`ops_tp.cu`): the MoE combine of one rank
//! (launched by the backend's `moe_partial`) and the one rounding of a
//! reduced sum (launched by the backend's all-reduce).

pub mod sources;

/// `out = routed + sigmoid(gate) · shared` in f32 over one rank's rows.
pub const MOE_COMBINE_PARTIAL: &str = "moe_combine_partial_f32";
/// An f32 sum rounded once to bf16.
pub const ROUND_F32_TO_BF16: &str = "round_f32_to_bf16";

#[cfg(test)]
mod tests {
    use super::sources::OPS_TP;
    use super::{MOE_COMBINE_PARTIAL, ROUND_F32_TO_BF16};

    #[test]
    fn the_launchers_names_are_the_sources_entry_points() {
        assert_eq!(
            OPS_TP.entry_points,
            [MOE_COMBINE_PARTIAL, ROUND_F32_TO_BF16]
        );
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
