//! The shapes of an MoE block's weights against its spec (every path of the
//! op checks them before any launch). Each weight may be bf16 or FP8 (the
//! paths that read one raw check its form themselves).

use crate::tensor::CudaWeight;
use headroom_core::ops::{MoeSpec, MoeWeights, OpError, OpResult};

/// Checks the expert weights against the spec and `hidden`.
pub(crate) fn check_weights(
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    hidden: usize,
) -> OpResult<()> {
    let (e, i) = (spec.num_experts, spec.intermediate);
    spec.check_local()
        .map_err(|detail| OpError::shape("moe", detail))?;
    // The experts whose weights this backend holds (expert parallelism).
    let local = spec.local_experts;
    if spec.top_k == 0 || spec.top_k > e {
        return Err(OpError::shape(
            "moe",
            format!("top_k {} must be in 1..={e}", spec.top_k),
        ));
    }
    let expect = |name: &str, wt: &CudaWeight, rows: Option<usize>, cols: usize| -> OpResult<()> {
        wt.any_matrix("moe")?;
        if rows.is_some_and(|r| r != wt.rows) || wt.cols != cols {
            return Err(OpError::shape(
                "moe",
                format!(
                    "{name} is [{}][{}], expected [{rows:?}][{cols}]",
                    wt.rows, wt.cols
                ),
            ));
        }
        Ok(())
    };
    expect("router", &w.router, Some(e), hidden)?;
    expect("gate_up", &w.gate_up, local.checked_mul(2 * i), hidden)?;
    expect("down", &w.down, local.checked_mul(hidden), i)?;
    expect("shared_gate", &w.shared_gate, Some(1), hidden)?;
    expect("shared_gate_proj", &w.shared_gate_proj, None, hidden)?;
    expect(
        "shared_up_proj",
        &w.shared_up_proj,
        Some(w.shared_gate_proj.rows),
        hidden,
    )?;
    expect(
        "shared_down_proj",
        &w.shared_down_proj,
        Some(hidden),
        w.shared_gate_proj.rows,
    )
}
