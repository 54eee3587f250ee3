//! The CPU backend's data: f32 activations ([`CpuAct`]), weights in their
//! storage dtype ([`CpuWeight`]), and the shape checks the ops share.

use crate::ops::WeightView;
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::Tensor;

/// An f32 activation `[rows][cols]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuAct {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl CpuAct {
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> CpuAct {
        debug_assert_eq!(data.len(), rows * cols);
        CpuAct { rows, cols, data }
    }

    pub(crate) fn zeros(rows: usize, cols: usize) -> CpuAct {
        CpuAct::new(rows, cols, vec![0.0; rows * cols])
    }

    /// Rows `r` of this activation.
    pub(crate) fn rows_of(&self, r: std::ops::Range<usize>) -> &[f32] {
        &self.data[r.start * self.cols..r.end * self.cols]
    }
}

/// A weight: a matrix in its storage dtype, or an f32 vector.
#[derive(Debug, Clone, PartialEq)]
pub enum CpuWeight {
    Matrix(Tensor),
    Vector(Vec<f32>),
}

impl CpuWeight {
    pub(crate) fn view(&self, op: &'static str) -> OpResult<WeightView<'_>> {
        match self {
            CpuWeight::Matrix(t) => Ok(WeightView::matrix(t)),
            CpuWeight::Vector(_) => Err(OpError::shape(op, "expected a matrix, got a vector")),
        }
    }

    pub(crate) fn vector(&self, op: &'static str) -> OpResult<&[f32]> {
        match self {
            CpuWeight::Vector(v) => Ok(v),
            CpuWeight::Matrix(_) => Err(OpError::shape(op, "expected a vector, got a matrix")),
        }
    }
}

pub(crate) fn same_shape(op: &'static str, a: &CpuAct, b: &CpuAct) -> OpResult<()> {
    if (a.rows, a.cols) != (b.rows, b.cols) {
        return Err(OpError::shape(
            op,
            format!("[{}][{}] vs [{}][{}]", a.rows, a.cols, b.rows, b.cols),
        ));
    }
    Ok(())
}

pub(crate) fn batch_rows(
    op: &'static str,
    x: &CpuAct,
    batch: &Batch,
    slots: usize,
) -> OpResult<()> {
    batch.validate_rows(op, x.rows, slots)
}

pub(crate) fn groups_of(op: &'static str, x: &CpuAct, group: usize) -> OpResult<()> {
    if group == 0 || !x.cols.is_multiple_of(group) {
        return Err(OpError::shape(
            op,
            format!("{} columns are not groups of {group}", x.cols),
        ));
    }
    Ok(())
}
