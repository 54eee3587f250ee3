//! The CPU backend's RMS norms: the residual add and its zero-centred
//! norm (stashing, under the emulation without the `ROUTER_INPUT` site, the
//! un-rounded normed rows the router reads: `router_input`), the per-group
//! norm and the gated norm, each rounded where the precision says.

use super::{groups_of, same_shape, CpuAct, CpuBackend, CpuWeight};
use crate::ops::rms_norm::{rms_norm_gated, rms_norm_offset};
use crate::precision::ActRounding;
use half::bf16;
use headroom_core::ops::{OpError, OpResult};

impl CpuBackend {
    /// The router's input: `x`, or under the emulation without the
    /// `ROUTER_INPUT` site the un-rounded normed rows `x` was rounded from.
    pub(crate) fn router_input(&self, x: &CpuAct) -> CpuAct {
        let stash = self.unrounded_norm.lock().ok().and_then(|mut s| s.take());
        match stash {
            Some(rows)
                if rows.len() == x.data.len()
                    && rows
                        .iter()
                        .zip(&x.data)
                        .all(|(a, b)| bf16::from_f32(*a).to_f32().to_bits() == b.to_bits()) =>
            {
                CpuAct::new(x.rows, x.cols, rows)
            }
            _ => x.clone(),
        }
    }
}

pub(crate) fn add_rms_norm(
    be: &CpuBackend,
    residual: &mut CpuAct,
    delta: Option<&CpuAct>,
    weight: &CpuWeight,
    eps: f32,
) -> OpResult<CpuAct> {
    let w = weight.vector("add_rms_norm")?;
    if w.len() != residual.cols {
        return Err(OpError::shape("add_rms_norm", "weight length != columns"));
    }
    if let Some(d) = delta {
        same_shape("add_rms_norm", residual, d)?;
        for (a, b) in residual.data.iter_mut().zip(&d.data) {
            *a += b;
        }
        be.round(ActRounding::RESIDUAL, &mut residual.data);
    }
    let mut out = residual.clone();
    rms_norm_offset(&mut out.data, w, eps);
    let act = be.precision.act;
    if act.contains(ActRounding::NORM) && !act.contains(ActRounding::ROUTER_INPUT) {
        if let Ok(mut s) = be.unrounded_norm.lock() {
            *s = Some(out.data.clone());
        }
    }
    be.round(ActRounding::NORM, &mut out.data);
    Ok(out)
}

pub(crate) fn rms_norm_groups(
    be: &CpuBackend,
    x: &mut CpuAct,
    weight: &CpuWeight,
    eps: f32,
) -> OpResult<()> {
    let w = weight.vector("rms_norm")?;
    groups_of("rms_norm", x, w.len())?;
    rms_norm_offset(&mut x.data, w, eps);
    be.round(ActRounding::ATTENTION, &mut x.data);
    Ok(())
}

pub(crate) fn gated_rms_norm(
    be: &CpuBackend,
    x: &mut CpuAct,
    z: &CpuAct,
    weight: &CpuWeight,
    eps: f32,
) -> OpResult<()> {
    let w = weight.vector("gated_rms_norm")?;
    same_shape("gated_rms_norm", x, z)?;
    groups_of("gated_rms_norm", x, w.len())?;
    rms_norm_gated(&mut x.data, &z.data, w, eps);
    be.round(ActRounding::GDN, &mut x.data);
    Ok(())
}
