//! Host-side validation of a gated-delta-rule launch: dims, buffer sizes,
//! sequence ranges and slots, all with checked arithmetic, before anything
//! reaches the device.

use super::GdnLaunch;
use crate::CudaError;

/// The head dim the kernels are compiled for (both key and value).
pub const SUPPORTED_DIM: usize = 128;

/// One validated, non-empty sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRun {
    pub slot: usize,
    pub first: usize,
    pub rows: usize,
}

/// What a validated launch runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Non-empty sequences, in the order given.
    pub seqs: Vec<SeqRun>,
}

fn bad(msg: String) -> CudaError {
    CudaError::InvalidLaunch(format!("gated_delta_rule: {msg}"))
}

fn mul(a: usize, b: usize) -> Result<usize, CudaError> {
    a.checked_mul(b)
        .ok_or_else(|| bad(format!("size {a} x {b} overflows")))
}

/// Checks `l` against its buffers; the plan of the sequences to run.
pub fn validate(l: &GdnLaunch<'_>) -> Result<Plan, CudaError> {
    let (hk, hv, dk, dv) = (l.k_heads, l.v_heads, l.k_dim, l.v_dim);
    if hk == 0 || hv == 0 || !hv.is_multiple_of(hk) {
        return Err(bad(format!(
            "v_heads {hv} must be a positive multiple of k_heads {hk}"
        )));
    }
    if hv > u16::MAX as usize {
        return Err(bad(format!("v_heads {hv} exceeds {}", u16::MAX)));
    }
    if dk != SUPPORTED_DIM || dv != SUPPORTED_DIM {
        return Err(bad(format!(
            "k_dim {dk} / v_dim {dv}: the CUDA kernels support {SUPPORTED_DIM} only"
        )));
    }
    let row_elems = mul(mul(2, hk)?, dk)?
        .checked_add(mul(hv, dv)?)
        .ok_or_else(|| bad("qkv row size overflows".into()))?;
    let rows_of = |bytes: usize, per_row: usize| bytes / per_row;
    let t_qkv = rows_of(l.qkv.len_bytes(), mul(row_elems, 2)?);
    let t_g = rows_of(l.g.len_bytes(), mul(hv, 4)?);
    let t_beta = rows_of(l.beta.len_bytes(), mul(hv, 4)?);
    let t_out = rows_of(l.out.len_bytes(), mul(mul(hv, dv)?, 2)?);
    let slots = rows_of(l.state.len_bytes(), mul(mul(mul(hv, dk)?, dv)?, 4)?);
    let limits = [("qkv", t_qkv), ("g", t_g), ("beta", t_beta), ("out", t_out)];

    let mut seqs = Vec::with_capacity(l.seqs.len());
    for (i, &(slot, first, rows)) in l.seqs.iter().enumerate() {
        if slot >= slots {
            return Err(bad(format!(
                "sequence {i}: slot {slot} but the state holds {slots} slots"
            )));
        }
        let end = first
            .checked_add(rows)
            .ok_or_else(|| bad(format!("sequence {i}: rows overflow")))?;
        for (name, t) in limits {
            if end > t {
                return Err(bad(format!(
                    "sequence {i}: rows {first}..{end} but {name} holds {t} rows"
                )));
            }
        }
        if end > i32::MAX as usize || slot > i32::MAX as usize {
            return Err(bad(format!("sequence {i}: row or slot past i32")));
        }
        if rows > 0 {
            seqs.push(SeqRun { slot, first, rows });
        }
    }
    let mut by_slot: Vec<usize> = seqs.iter().map(|s| s.slot).collect();
    by_slot.sort_unstable();
    if let Some(w) = by_slot.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(format!(
            "slot {} is used by two sequences of one launch",
            w[0]
        )));
    }
    let mut by_row: Vec<(usize, usize)> = seqs.iter().map(|s| (s.first, s.rows)).collect();
    by_row.sort_unstable();
    if let Some(w) = by_row.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(bad(format!(
            "sequences at rows {} and {} overlap",
            w[0].0, w[1].0
        )));
    }
    Ok(Plan { seqs })
}
