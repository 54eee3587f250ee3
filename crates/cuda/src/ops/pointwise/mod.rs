//! Element-wise and gather ops (`ops_pointwise.cu`): the embedding and row
//! gathers, the element-wise gates, the GDN gating.

pub mod sources;

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, stride_grid, upload, Args, GRID_X};
use crate::tensor::{new_act, CudaAct, CudaWeight};
use crate::validate::{bf16, same_shape};
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

/// Rows `table[ids[i]]` as f32: the start of the residual stream, which
/// stays f32 (`add_rms_norm` adds each layer's bf16 output to it in f32).
pub(crate) fn embed(dev: &CudaDevice, table: &CudaWeight, ids: &[u32]) -> OpResult<CudaAct> {
    let table = table.matrix("embed")?;
    if let Some(&bad) = ids.iter().find(|&&id| id as usize >= table.rows) {
        return Err(OpError::shape(
            "embed",
            format!("token id {bad} >= vocab {}", table.rows),
        ));
    }
    let out = new_act(dev, "embed", ids.len(), table.cols, Dtype::F32)?;
    if ids.is_empty() {
        return Ok(out);
    }
    let ids_dev = upload(dev, ids)?;
    let cols = int("embed", "hidden", table.cols)?;
    let args = Args::new()
        .ptr(table.ptr())
        .ptr(ids_dev.ptr())
        .ptr(out.ptr())
        .i32(cols);
    let grid = (grid_dim("embed", ids.len(), GRID_X)?, 1, 1);
    // SAFETY: ids < rows (checked); out holds ids.len() f32 rows of `cols`.
    unsafe { launch(dev, "embed_bf16_to_f32", grid, 256, args)? };
    Ok(out)
}

/// The bit of an uploaded id of [`embed_drawn`] that names a drawn row.
const DRAWN_BIT: u32 = 1 << 31;

/// [`embed`] of `ids` whose entries `holes[j].0` are row `holes[j].1` of
/// `drawn`, read from the device (`embed_drawn_bf16_to_f32`): the host ids
/// and the holes are checked here, the drawn tokens by the kernel (a row
/// with no finite logit gives a NaN row).
pub(crate) fn embed_drawn(
    dev: &CudaDevice,
    table: &CudaWeight,
    ids: &[u32],
    holes: &[(usize, usize)],
    drawn: &crate::ops::sample::Drawn,
) -> OpResult<CudaAct> {
    let op = "embed_drawn";
    if holes.is_empty() {
        return embed(dev, table, ids);
    }
    let table = table.matrix(op)?;
    // A draw of no rows has no device buffer, and code_holes refuses any
    // hole of it.
    let coded = code_holes(ids, holes, drawn.rows(), table.rows)?;
    let tokens = drawn
        .device()
        .ok_or_else(|| OpError::shape(op, "holes in a draw of no rows"))?;
    let out = new_act(dev, op, ids.len(), table.cols, Dtype::F32)?;
    let ids_dev = upload(dev, &coded)?;
    let args = Args::new()
        .ptr(table.ptr())
        .ptr(ids_dev.ptr())
        .ptr(tokens.ptr())
        .ptr(out.ptr())
        .i32(int(op, "hidden", table.cols)?)
        .i32(int(op, "vocab", table.rows)?);
    let grid = (grid_dim(op, ids.len(), GRID_X)?, 1, 1);
    // SAFETY: host ids < rows and hole rows < drawn rows (checked in
    // code_holes); the kernel checks the drawn tokens against `vocab`; out
    // holds ids.len() f32 rows of `cols`.
    unsafe { launch(dev, "embed_drawn_bf16_to_f32", grid, 256, args)? };
    Ok(out)
}

/// `ids` as `embed_drawn_bf16_to_f32` reads them: hole `j` replaced by
/// [`DRAWN_BIT`] | its drawn row. Errors: a host id ≥ `vocab` (not a
/// hole), a hole outside `ids` or past `drawn_rows`, a vocabulary or a
/// drawn row that does not fit below the bit.
fn code_holes(
    ids: &[u32],
    holes: &[(usize, usize)],
    drawn_rows: usize,
    vocab: usize,
) -> OpResult<Vec<u32>> {
    let op = "embed_drawn";
    if vocab > DRAWN_BIT as usize || drawn_rows > DRAWN_BIT as usize {
        return Err(OpError::shape(
            op,
            format!("vocab {vocab} or {drawn_rows} drawn rows ≥ 2^31"),
        ));
    }
    let mut coded = ids.to_vec();
    let mut is_hole = vec![false; ids.len()];
    for &(at, row) in holes {
        if at >= ids.len() || row >= drawn_rows {
            return Err(OpError::shape(
                op,
                format!(
                    "hole ({at}, {row}) outside {} ids and {drawn_rows} drawn rows",
                    ids.len()
                ),
            ));
        }
        coded[at] = DRAWN_BIT | row as u32;
        is_hole[at] = true;
    }
    if let Some((_, &bad)) = ids
        .iter()
        .enumerate()
        .find(|&(i, &id)| !is_hole[i] && id as usize >= vocab)
    {
        return Err(OpError::shape(
            op,
            format!("token id {bad} >= vocab {vocab}"),
        ));
    }
    Ok(coded)
}

/// `out[i] = x[rows[i]]` (bf16 or f32 activations).
pub(crate) fn gather_rows(dev: &CudaDevice, x: &CudaAct, rows: &[usize]) -> OpResult<CudaAct> {
    if let Some(&bad) = rows.iter().find(|&&r| r >= x.rows) {
        return Err(OpError::shape(
            "gather_rows",
            format!("row {bad} >= {}", x.rows),
        ));
    }
    let out = new_act(dev, "gather_rows", rows.len(), x.cols, x.dtype)?;
    if rows.is_empty() || x.cols == 0 {
        return Ok(out);
    }
    let idx: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    let idx_dev = upload(dev, &idx)?;
    let aligned = x.ptr().is_multiple_of(16) && out.ptr().is_multiple_of(16);
    let (entry, units) = gather_entry(x.cols, x.dtype.size_bytes(), aligned);
    let units = int("gather_rows", "columns", units)?;
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(idx_dev.ptr())
        .ptr(out.ptr())
        .i32(units);
    let grid = (grid_dim("gather_rows", rows.len(), GRID_X)?, 1, 1);
    // SAFETY: every index < x.rows (checked); out holds rows.len() rows.
    unsafe { launch(dev, entry, grid, 256, args)? };
    Ok(out)
}

/// The gather kernel for rows of `cols` elements of `size` bytes and its
/// row length in the kernel's units: 16-byte units when both buffers start
/// 16-byte aligned (driver allocations are) and a row is a multiple of 16
/// bytes (so every row starts aligned), else elements.
fn gather_entry(cols: usize, size: usize, aligned: bool) -> (&'static str, usize) {
    let bytes = cols * size;
    if aligned && bytes.is_multiple_of(16) {
        ("gather_rows_v16", bytes / 16)
    } else if size == 2 {
        ("gather_rows_b16", cols)
    } else {
        ("gather_rows_b32", cols)
    }
}

/// In place `x *= sigmoid(gate)`.
pub(crate) fn mul_sigmoid(dev: &CudaDevice, x: &mut CudaAct, gate: &CudaAct) -> OpResult<()> {
    bf16("mul_sigmoid", x)?;
    same_shape("mul_sigmoid", x, gate)?;
    let n = x.elems();
    if n == 0 {
        return Ok(());
    }
    // SAFETY: both hold n bf16 elements.
    unsafe { mul_sigmoid_raw(dev, x.ptr(), gate.ptr(), n) }
}

/// `x *= sigmoid(gate)` over `n` bf16 elements at device addresses.
///
/// # Safety
/// `x` and `gate` must address `n` bf16 elements of live device memory.
pub(crate) unsafe fn mul_sigmoid_raw(
    dev: &CudaDevice,
    x: u64,
    gate: u64,
    n: usize,
) -> OpResult<()> {
    let args = Args::new().ptr(x).ptr(gate).i64(n as i64);
    // SAFETY: as the caller promises.
    unsafe { launch(dev, "mul_sigmoid_bf16", stride_grid(n, 256), 256, args) }
}

/// `silu(gate) ⊙ up`.
pub(crate) fn swiglu(dev: &CudaDevice, gate: &CudaAct, up: &CudaAct) -> OpResult<CudaAct> {
    bf16("swiglu", gate)?;
    same_shape("swiglu", gate, up)?;
    let out = new_act(dev, "swiglu", gate.rows, gate.cols, Dtype::Bf16)?;
    let n = gate.elems();
    if n > 0 {
        let args = Args::new()
            .ptr(gate.ptr())
            .ptr(up.ptr())
            .ptr(out.ptr())
            .i64(n as i64);
        if ![gate.ptr(), up.ptr(), out.ptr()]
            .iter()
            .all(|p| p.is_multiple_of(16))
        {
            return Err(OpError::shape(
                "swiglu",
                "gate, up and out must start 16-byte aligned (the kernel loads 8 elements at once)",
            ));
        }
        // SAFETY: all three hold n bf16 elements and start 16-byte aligned.
        unsafe {
            launch(
                dev,
                "swiglu_v8_bf16",
                stride_grid(n.div_ceil(8), 256),
                256,
                args,
            )?
        };
    }
    Ok(out)
}

/// `(g, beta)` in f32 from `a`, `b` `[t][heads]`.
pub(crate) fn gdn_gating(
    dev: &CudaDevice,
    a: &CudaAct,
    b: &CudaAct,
    a_log: &CudaWeight,
    dt_bias: &CudaWeight,
) -> OpResult<(CudaAct, CudaAct)> {
    bf16("gdn_gating", a)?;
    same_shape("gdn_gating", a, b)?;
    let (a_log, dt_bias) = (a_log.vector("gdn_gating")?, dt_bias.vector("gdn_gating")?);
    if a_log.elems() != a.cols || dt_bias.elems() != a.cols {
        return Err(OpError::shape(
            "gdn_gating",
            "A_log / dt_bias length != heads",
        ));
    }
    let g = new_act(dev, "gdn_gating", a.rows, a.cols, Dtype::F32)?;
    let beta = new_act(dev, "gdn_gating", a.rows, a.cols, Dtype::F32)?;
    let n = a.elems();
    if n > 0 {
        let heads = int("gdn_gating", "heads", a.cols)?;
        let args = Args::new()
            .ptr(a.ptr())
            .ptr(b.ptr())
            .ptr(a_log.ptr())
            .ptr(dt_bias.ptr())
            .ptr(g.ptr())
            .ptr(beta.ptr())
            .i64(n as i64)
            .i32(heads);
        // SAFETY: a, b hold n bf16; g, beta n f32; the vectors `heads` f32.
        unsafe { launch(dev, "gdn_gating_bf16", stride_grid(n, 256), 256, args)? };
    }
    Ok((g, beta))
}

#[cfg(test)]
mod tests {
    use super::{code_holes, gather_entry, DRAWN_BIT};

    #[test]
    fn holes_are_coded_with_the_drawn_bit_and_host_ids_stay() {
        let coded = code_holes(&[5, 0, 7, 0], &[(1, 2), (3, 0)], 3, 10).unwrap();
        assert_eq!(coded, vec![5, DRAWN_BIT | 2, 7, DRAWN_BIT]);
    }

    #[test]
    fn bad_holes_and_host_ids_are_refused_but_a_hole_may_hold_anything() {
        assert!(
            code_holes(&[5, 0], &[(2, 0)], 1, 10).is_err(),
            "hole past the ids"
        );
        assert!(
            code_holes(&[5, 0], &[(1, 1)], 1, 10).is_err(),
            "row past the drawn"
        );
        assert!(
            code_holes(&[10, 0], &[(1, 0)], 1, 10).is_err(),
            "host id past vocab"
        );
        assert!(
            code_holes(&[5, u32::MAX], &[(1, 0)], 1, 10).is_ok(),
            "a hole's own value is ignored"
        );
        assert!(
            code_holes(&[5], &[], 1, (1usize << 31) + 1).is_err(),
            "vocab past the bit"
        );
    }

    #[test]
    fn rows_of_whole_16_byte_units_gather_by_16_bytes_and_others_by_element() {
        // A bf16 row of the vocabulary (248,320 columns) and the hidden rows.
        assert_eq!(gather_entry(248_320, 2, true), ("gather_rows_v16", 31_040));
        assert_eq!(gather_entry(2048, 4, true), ("gather_rows_v16", 512));
        assert_eq!(gather_entry(1004, 2, true), ("gather_rows_b16", 1004));
        assert_eq!(gather_entry(130, 4, true), ("gather_rows_b32", 130));
        assert_eq!(gather_entry(2048, 2, false), ("gather_rows_b16", 2048));
        assert_eq!(gather_entry(2048, 4, false), ("gather_rows_b32", 2048));
    }
}
