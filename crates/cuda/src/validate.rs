//! Shape checks shared by the ops: every mismatch is an [`OpError`] naming
//! the op, before anything is launched.

use crate::tensor::CudaAct;
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::Dtype;

/// `x` must be a bf16 activation.
pub(crate) fn bf16(op: &'static str, x: &CudaAct) -> OpResult<()> {
    if x.dtype != Dtype::Bf16 {
        return Err(OpError::shape(
            op,
            format!("needs a bf16 activation, got {}", x.dtype),
        ));
    }
    Ok(())
}

/// `a` and `b` must have the same shape and dtype.
pub(crate) fn same_shape(op: &'static str, a: &CudaAct, b: &CudaAct) -> OpResult<()> {
    if (a.rows, a.cols, a.dtype) != (b.rows, b.cols, b.dtype) {
        return Err(OpError::shape(
            op,
            format!(
                "[{}][{}] {} vs [{}][{}] {}",
                a.rows, a.cols, a.dtype, b.rows, b.cols, b.dtype
            ),
        ));
    }
    Ok(())
}

/// The batch must be consistent, its slots `< slots`, and cover `x`'s rows.
pub(crate) fn batch_rows(
    op: &'static str,
    x: &CudaAct,
    batch: &Batch,
    slots: usize,
) -> OpResult<()> {
    batch.validate_rows(op, x.rows, slots)
}

/// `x`'s columns must be whole groups of `group` (> 0).
pub(crate) fn groups_of(op: &'static str, x: &CudaAct, group: usize) -> OpResult<()> {
    if group == 0 || !x.cols.is_multiple_of(group) {
        return Err(OpError::shape(
            op,
            format!("{} columns are not groups of {group}", x.cols),
        ));
    }
    Ok(())
}

/// Per packed row: the first row of its sequence and its slot (for the
/// varlen kernels), as i32.
pub(crate) fn row_tables(op: &'static str, batch: &Batch) -> OpResult<(Vec<i32>, Vec<i32>)> {
    let mut start = Vec::with_capacity(batch.rows());
    let mut slot = Vec::with_capacity(batch.rows());
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        let s = super::launch::int(op, "row", r.start)?;
        let sl = super::launch::int(op, "slot", batch.slots[i])?;
        start.extend(std::iter::repeat_n(s, r.len()));
        slot.extend(std::iter::repeat_n(sl, r.len()));
    }
    Ok((start, slot))
}
