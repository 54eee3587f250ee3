//! The gated delta rule op: checks the batch and shapes, then runs the
//! chunked kernel of [`super::external`] over each sequence's slot state.

use super::external::{gated_delta_rule as launch_rule, GdnCall};
use super::memory::new_act;
use super::types::{CudaAct, CudaGdnState};
use super::validate::{batch_rows, bf16};
use crate::device::CudaDevice;
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::Dtype;

pub(crate) fn gated_delta_rule(
    dev: &CudaDevice,
    qkv: &CudaAct,
    g: &CudaAct,
    beta: &CudaAct,
    state: &mut CudaGdnState,
    batch: &Batch,
) -> OpResult<CudaAct> {
    let op = "gated_delta_rule";
    let spec = state.spec;
    bf16(op, qkv)?;
    if qkv.cols != spec.conv_dim() || g.cols != spec.v_heads || beta.cols != spec.v_heads {
        return Err(OpError::shape(
            op,
            format!("qkv {} / g {} columns for {spec:?}", qkv.cols, g.cols),
        ));
    }
    if g.rows != qkv.rows
        || beta.rows != qkv.rows
        || g.dtype != Dtype::F32
        || beta.dtype != Dtype::F32
    {
        return Err(OpError::shape(
            op,
            "g and beta must be f32 [t][v_heads] (from gdn_gating)",
        ));
    }
    batch_rows(op, qkv, batch, spec.slots)?;
    let out = new_act(dev, op, qkv.rows, spec.v_heads * spec.v_dim, Dtype::Bf16)?;
    let seqs: Vec<(usize, usize, usize)> = (0..batch.sequences())
        .map(|i| (batch.slots[i], batch.cu_seqlens[i], batch.seq_len(i)))
        .collect();
    launch_rule(
        dev,
        &GdnCall {
            qkv: &qkv.buf,
            g: &g.buf,
            beta: &beta.buf,
            state: &state.recurrent,
            out: &out.buf,
            seqs: &seqs,
            k_heads: spec.k_heads,
            v_heads: spec.v_heads,
            k_dim: spec.k_dim,
            v_dim: spec.v_dim,
        },
    )?;
    Ok(out)
}
