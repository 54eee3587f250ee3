//! The Gated DeltaNet ops of the CPU backend: causal conv1d + SiLU with
//! per-slot conv state, the gating (`g`, `beta`, never rounded: f32 on
//! CUDA too) and the gated delta rule over each sequence's slot.

use super::{batch_rows, same_shape, CpuAct, CpuBackend, CpuWeight};
use crate::ops::activation::{sigmoid, softplus};
use crate::ops::conv1d::causal_conv1d_silu;
use crate::ops::gated_delta::{gated_delta_rule as delta_rule, DeltaDims};
use crate::precision::ActRounding;
use crate::state::CpuGdnState;
use headroom_core::ops::{Batch, OpError, OpResult};

pub(crate) fn conv1d_silu(
    be: &CpuBackend,
    x: &CpuAct,
    weight: &CpuWeight,
    state: &mut CpuGdnState,
    batch: &Batch,
) -> OpResult<CpuAct> {
    let spec = state.spec;
    let w = match weight {
        CpuWeight::Vector(v) => v.as_slice(),
        CpuWeight::Matrix(_) => {
            return Err(OpError::shape(
                "conv1d_silu",
                "upload the conv weight as a vector",
            ))
        }
    };
    if x.cols != spec.conv_dim() || w.len() != spec.conv_dim() * spec.kernel {
        return Err(OpError::shape(
            "conv1d_silu",
            format!(
                "{} columns / weight {} for conv_dim {} kernel {}",
                x.cols,
                w.len(),
                spec.conv_dim(),
                spec.kernel
            ),
        ));
    }
    batch_rows("conv1d_silu", x, batch, spec.slots)?;
    let mut out = CpuAct::zeros(x.rows, x.cols);
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        let slot = batch.slots[i];
        let cols = x.cols;
        causal_conv1d_silu(
            x.rows_of(r.clone()),
            cols,
            w,
            spec.kernel,
            &mut state.conv[slot],
            &mut out.data[r.start * cols..r.end * cols],
        );
    }
    be.round(ActRounding::GDN, &mut out.data);
    Ok(out)
}

pub(crate) fn gdn_gating(
    a: &CpuAct,
    b: &CpuAct,
    a_log: &CpuWeight,
    dt_bias: &CpuWeight,
) -> OpResult<(CpuAct, CpuAct)> {
    let (a_log, dt) = (a_log.vector("gdn_gating")?, dt_bias.vector("gdn_gating")?);
    same_shape("gdn_gating", a, b)?;
    if a_log.len() != a.cols || dt.len() != a.cols {
        return Err(OpError::shape(
            "gdn_gating",
            "A_log / dt_bias length != heads",
        ));
    }
    let beta = CpuAct::new(b.rows, b.cols, b.data.iter().map(|&v| sigmoid(v)).collect());
    let g = a
        .data
        .chunks_exact(a.cols)
        .flat_map(|row| {
            row.iter()
                .enumerate()
                .map(|(h, &av)| -a_log[h].exp() * softplus(av + dt[h]))
        })
        .collect();
    Ok((CpuAct::new(a.rows, a.cols, g), beta))
}

pub(crate) fn gated_delta_rule(
    be: &CpuBackend,
    qkv: &CpuAct,
    g: &CpuAct,
    beta: &CpuAct,
    state: &mut CpuGdnState,
    batch: &Batch,
) -> OpResult<CpuAct> {
    let spec = state.spec;
    let (kd, vd) = (spec.k_heads * spec.k_dim, spec.v_heads * spec.v_dim);
    if qkv.cols != spec.conv_dim() || g.cols != spec.v_heads {
        return Err(OpError::shape(
            "gated_delta_rule",
            format!("qkv {} / g {} columns for {spec:?}", qkv.cols, g.cols),
        ));
    }
    same_shape("gated_delta_rule", g, beta)?;
    batch_rows("gated_delta_rule", qkv, batch, spec.slots)?;
    if g.rows != qkv.rows {
        return Err(OpError::shape("gated_delta_rule", "g rows != qkv rows"));
    }
    let dims = DeltaDims {
        k_heads: spec.k_heads,
        v_heads: spec.v_heads,
        k_dim: spec.k_dim,
        v_dim: spec.v_dim,
    };
    let mut out = CpuAct::new(qkv.rows, vd, vec![f32::NAN; qkv.rows * vd]);
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        let t = r.len();
        let mut q = Vec::with_capacity(t * kd);
        let mut k = Vec::with_capacity(t * kd);
        let mut v = Vec::with_capacity(t * vd);
        for row in qkv.rows_of(r.clone()).chunks_exact(qkv.cols) {
            q.extend_from_slice(&row[..kd]);
            k.extend_from_slice(&row[kd..2 * kd]);
            v.extend_from_slice(&row[2 * kd..]);
        }
        delta_rule(
            dims,
            &q,
            &k,
            &v,
            g.rows_of(r.clone()),
            beta.rows_of(r.clone()),
            &mut state.recurrent[batch.slots[i]],
            &mut out.data[r.start * vd..r.end * vd],
        );
    }
    be.round(ActRounding::GDN, &mut out.data);
    Ok(out)
}
