//! The sparse MoE block: router logits (f32, cuBLAS), the routed experts
//! (the grouped-GEMM kernel of [`super::external`]), and the shared expert
//! (gate/up/down GEMMs + SwiGLU, scaled by `sigmoid(shared_gate · x)`),
//! summed into the bf16 output: by the routed combine itself where the
//! grouped-GEMM path runs, else (shapes the grouped GEMMs' tiles do not
//! divide: the fallback kernels) by one element-wise kernel after the f32
//! routed output. FP8 experts (a checkpoint kept FP8 on the device) run the
//! decode kernels' FP8 instantiation (`crate::ops::moe::decode`) for 1 ..= 8
//! rows, the FP8 decode (`crate::ops::fp8::moe`) to 32 rows; for more rows
//! the native FP8 grouped GEMMs (`crate::ops::moe::fp8`) where they take the
//! call ([`native_fp8`]), else the experts are dequantized into bf16
//! scratch, one layer's experts at a time
//! (`crate::ops::fp8::moe::fp8_expert_scratch_bytes`), for the bf16 grouped
//! GEMMs.

use super::dense::{linear, swiglu};
use super::external::{moe_fast_path, routed_experts, MoeCall};
use super::launch::{alloc, dev_err, launch, stride_grid, Args};
use super::memory::new_act;
use super::types::{CudaAct, CudaWeight};
use super::validate::bf16;
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::ops::fp8::gemm::QuantizedX;
use crate::ops::fp8::moe::{moe_decode_fp8, SharedPart};
use crate::ops::fp8::weight::{as_bf16, experts_of};
use crate::ops::linear::{linear_fp8_from, linear_many, linear_with};
use crate::ops::moe::fp8::{native_takes, routed_experts_fp8_from, Fp8ExpertScales};
use crate::ops::moe::{
    check_weights, decode, routed_experts_shared_marked, GemmImpl, MoeStage, NormEpilogue,
    SharedEpilogue,
};
use headroom_core::ops::{Backend, MoeSpec, MoeWeights, OpError, OpResult};
use headroom_core::Dtype;

/// The shared expert's output before its gate, bf16 `[t][hidden]`.
pub(crate) fn shared_expert(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
) -> OpResult<CudaAct> {
    shared_expert_from(dev, x, w, None)
}

/// [`shared_expert`] with FP8 gate and up as one set on `pre`'s codes of
/// `x` (quantized once for the routed experts too) where given.
fn shared_expert_from(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    pre: Option<&QuantizedX>,
) -> OpResult<CudaAct> {
    let (gate, up) = (&w.shared_gate_proj, &w.shared_up_proj);
    let (g, u) = match pre {
        Some(pre) if gate.is_fp8() && up.is_fp8() => gate_and_up(linear_fp8_from(
            dev,
            x,
            &[gate, up],
            Dtype::Bf16,
            Some(pre),
        )?)?,
        _ => (
            linear(dev, x, gate, Dtype::Bf16)?,
            linear(dev, x, up, Dtype::Bf16)?,
        ),
    };
    linear(dev, &swiglu(dev, &g, &u)?, &w.shared_down_proj, Dtype::Bf16)
}

/// The shared expert's gate and up from the two outputs of one launch.
fn gate_and_up(mut gu: Vec<CudaAct>) -> OpResult<(CudaAct, CudaAct)> {
    match (gu.pop(), gu.pop()) {
        (Some(u), Some(g)) => Ok((g, u)),
        _ => Err(OpError::Device(
            "moe: the shared expert returned no gate/up".into(),
        )),
    }
}

/// The MoE block of `x`: few rows on the decode kernels unless
/// `batch_invariant` (then every row count on the grouped GEMMs, whose
/// families all give a row the same bits: `CudaBackend::with_batch_invariant`).
pub(crate) fn moe(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    batch_invariant: bool,
) -> OpResult<CudaAct> {
    match moe_then(dev, x, w, spec, batch_invariant, None)? {
        MoeOut::Block(out) | MoeOut::Normed(out) => Ok(out),
    }
}

/// The add + RMSNorm that follows a MoE block ([`moe_then`]): `residual`
/// (f32, of rows of at most [`NORM_EPILOGUE_MAX_COLS`]) `+=` the block's
/// output, then the zero-centred norm with `weight` (f32 `[hidden]`), with
/// the rows' e4m3 codes when `codes` (hidden of whole 128-column groups).
#[derive(Clone, Copy)]
pub(crate) struct NextNorm<'a> {
    pub(crate) residual: &'a CudaAct,
    pub(crate) weight: &'a CudaWeight,
    pub(crate) eps: f32,
    pub(crate) codes: bool,
}

/// What [`moe_then`] returns.
pub(crate) enum MoeOut {
    /// The block's output (bf16 `[rows][hidden]`): the norm, if one was
    /// given, is the caller's to take.
    Block(CudaAct),
    /// The norm taken: its rows (with codes where asked), the residual
    /// updated.
    Normed(CudaAct),
}

/// [`moe`], with `next` folded into the combine where the grouped-GEMM path
/// runs with its shared-expert combine (`moe_combine_shared_norm`: the same
/// bits as the block and then `add_rms_norm`).
pub(crate) fn moe_then(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    batch_invariant: bool,
    next: Option<NextNorm<'_>>,
) -> OpResult<MoeOut> {
    if !batch_invariant {
        // Few rows (decode): three GEMV launches (`crate::ops::moe::decode`),
        // bf16 or FP8 experts.
        if decode::takes(x, w, spec) {
            return decode::moe_decode(dev, x, w, spec).map(MoeOut::Block);
        }
        if spec.shared_expert && crate::ops::fp8::moe::takes(x, w, spec) {
            return moe_fp8_decode(dev, x, w, spec).map(MoeOut::Block);
        }
    }
    moe_marked(dev, x, w, spec, None, next, &mut |_| {})
}

/// The MoE block on the FP8 decode path (FP8 experts, 1 ..= 32 rows), the
/// router and the shared expert on `linear` (FP8 or bf16).
fn moe_fp8_decode(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
) -> OpResult<CudaAct> {
    bf16("moe", x)?;
    check_weights(w, spec, x.cols)?;
    if !spec.shared_expert {
        return Err(OpError::Unsupported {
            op: "moe decode (fp8)",
            reason: "a block without its shared expert runs only as a group's moe_partial".into(),
        });
    }
    // The router and the shared gate in one launch (f32 logits), the
    // shared expert's gate and up in one.
    let mut logits = linear_with(dev, x, &[&w.router, &w.shared_gate], true, Dtype::F32)?;
    let (gate, logits) = (logits.pop(), logits.pop());
    let (Some(gate), Some(logits)) = (gate, logits) else {
        return Err(OpError::Device(
            "moe: the router launch returned no logits".into(),
        ));
    };
    let (g, u) = gate_and_up(linear_many(
        dev,
        x,
        &[&w.shared_gate_proj, &w.shared_up_proj],
    )?)?;
    let shared = linear(dev, &swiglu(dev, &g, &u)?, &w.shared_down_proj, Dtype::Bf16)?;
    let part = SharedPart {
        out: &shared,
        gate: &gate,
    };
    moe_decode_fp8(dev, x, &logits, w, spec, Some(part))
}

impl super::CudaBackend {
    /// The MoE op (its grouped-GEMM path, whatever the row count) with the
    /// grouped-GEMM kernels `imp` (`None`: chosen per pass, as the op does)
    /// where the shape takes the grouped GEMMs, calling `mark` with a stage
    /// name (`router`, `shared`, `route`, `gate_up`, `down`, `combine`,
    /// `glue`, `end`) before each stage's launches: a bench records events there.
    pub fn moe_marked(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
        imp: Option<GemmImpl>,
        mark: &mut dyn FnMut(&'static str),
    ) -> OpResult<CudaAct> {
        match moe_marked(&self.dev, x, w, spec, imp, None, mark)? {
            MoeOut::Block(out) | MoeOut::Normed(out) => Ok(out),
        }
    }

    /// The MoE block on the decode kernels, bf16 or FP8 experts (tests and
    /// benches compare it with [`Self::moe_marked`]); `Err` for shapes and
    /// weight formats they do not take.
    pub fn moe_decode(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
    ) -> OpResult<CudaAct> {
        decode::moe_decode(&self.dev, x, w, spec)
    }

    /// The MoE block on the FP8 decode path (FP8 experts, 1 ..=
    /// `crate::ops::fp8::moe::MAX_DECODE_ROWS` rows; tests and timings
    /// compare it with [`Self::moe_marked`]); `Err` for other calls.
    pub fn moe_fp8_decode(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
    ) -> OpResult<CudaAct> {
        moe_fp8_decode(&self.dev, x, w, spec)
    }

    /// Whether the MoE block after the post-attention norm takes the decode
    /// kernels with that norm folded into their router
    /// ([`decode::moe_decode_after_norm`]: few rows, one device; one launch
    /// fewer on the decode chain, the same bits).
    pub(super) fn decodes_after_norm(
        &self,
        residual: &CudaAct,
        delta: &CudaAct,
        norm: &CudaWeight,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
    ) -> bool {
        self.comm.is_none()
            && !self.batch_invariant
            && decode::takes_after_norm(residual, delta, norm, w, spec)
    }

    /// `Backend::add_rms_norm_moe_add_rms_norm`: where the post-norm rows
    /// take the grouped-GEMM path (more rows than the decode kernels'), the
    /// next norm is folded into the block's combine ([`moe_then`] with a
    /// [`NextNorm`]); elsewhere the calls.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn moe_then_next_norm(
        &self,
        residual: &mut CudaAct,
        delta: &CudaAct,
        norm: &CudaWeight,
        eps: f32,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
        next_norm: &CudaWeight,
    ) -> OpResult<CudaAct> {
        // Few rows take the decode kernels (the router folds the post norm
        // in), then the next norm.
        if self.decodes_after_norm(residual, delta, norm, w, spec) {
            let out =
                decode::moe_decode_after_norm(&self.dev, residual, delta, norm, eps, w, spec)?;
            return self.add_rms_norm(residual, Some(&out), next_norm, eps);
        }
        let cols = residual.cols;
        let folds = self.comm.is_none()
            && residual.dtype == Dtype::F32
            && crate::ops::norm::quad_takes(cols)
            && cols <= crate::ops::moe::NORM_EPILOGUE_MAX_COLS
            && next_norm.vector("moe")?.elems() == cols;
        let normed = self.add_rms_norm(residual, Some(delta), norm, eps)?;
        if !folds {
            let out = self.moe_partial(&normed, w, spec)?;
            return self.add_rms_norm(residual, Some(&out), next_norm, eps);
        }
        let next = NextNorm {
            residual,
            weight: next_norm,
            eps,
            codes: self.writes_fp8_codes(residual.rows)
                && cols.is_multiple_of(crate::ops::fp8::BLOCK),
        };
        match moe_then(
            &self.dev,
            &normed,
            w,
            spec,
            self.batch_invariant,
            Some(next),
        )? {
            MoeOut::Normed(n) => Ok(n),
            MoeOut::Block(out) => self.add_rms_norm(residual, Some(&out), next_norm, eps),
        }
    }

    /// [`Self::moe_decode`] calling `mark` with `route`, `gate_up`, `down`
    /// before each launch and `end` after the last.
    pub fn moe_decode_marked(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
        mark: &mut dyn FnMut(&'static str),
    ) -> OpResult<CudaAct> {
        decode::moe_decode_marked(&self.dev, x, w, spec, mark)
    }
}

/// The routed-experts launch of `x` with output buffer `out`, the experts'
/// bf16 matrices `gate_up` and `down` (the weights', or their dequantized
/// copies).
pub(super) fn call<'a>(
    x: &'a CudaAct,
    logits: &'a CudaAct,
    (gate_up, down): (&'a CudaWeight, &'a CudaWeight),
    spec: &MoeSpec,
    out: &'a DeviceBuffer,
) -> MoeCall<'a> {
    MoeCall {
        x: &x.buf,
        router_logits: &logits.buf,
        gate_up: &gate_up.buf,
        down: &down.buf,
        out,
        tokens: x.rows,
        hidden: x.cols,
        experts: spec.num_experts,
        top_k: spec.top_k,
        intermediate: spec.intermediate,
        renormalise: spec.renormalise,
    }
}

fn stage_name(s: MoeStage) -> &'static str {
    match s {
        MoeStage::Route => "route",
        MoeStage::GateUp => "gate_up",
        MoeStage::Down => "down",
        MoeStage::Combine => "combine",
        MoeStage::End => "end",
    }
}

fn moe_marked(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    imp: Option<GemmImpl>,
    next: Option<NextNorm<'_>>,
    mark: &mut dyn FnMut(&'static str),
) -> OpResult<MoeOut> {
    bf16("moe", x)?;
    let hidden = x.cols;
    check_weights(w, spec, hidden)?;
    if !spec.shared_expert {
        return Err(OpError::Unsupported {
            op: "moe",
            reason: "a block without its shared expert runs only as a group's moe_partial".into(),
        });
    }
    let local = (spec.first_expert, spec.local_experts);
    // FP8 experts: the native grouped GEMMs where they take the call (and no
    // kernels were asked for), else this layer's bf16 copies, dropped when
    // the call returns.
    let native = imp
        .is_none()
        .then(|| native_fp8(dev, w, spec, hidden))
        .flatten();
    let copies = match native {
        Some(_) => None,
        None => Some((as_bf16(dev, &w.gate_up)?, as_bf16(dev, &w.down)?)),
    };
    let experts = match &copies {
        Some((g, d)) => (&**g, &**d),
        None => (&w.gate_up, &w.down),
    };
    mark("router");
    let logits = linear(dev, x, &w.router, Dtype::F32)?;
    let out = new_act(dev, "moe", x.rows, hidden, Dtype::Bf16)?;
    if moe_fast_path(hidden, spec.intermediate) {
        // The shared expert first: the routed combine adds it, gated, and
        // writes the bf16 output (`out` of the call is not touched).
        mark("shared");
        // FP8 experts: x quantized once (by its norm, or here), for the
        // shared expert's gate and up and the routed experts alike.
        let own;
        let pre = match (native, x.quantized()) {
            (Some(_), Some(q)) => Some(q),
            (Some(_), None) => {
                own = QuantizedX::new(dev, &x.buf, x.rows, hidden)?;
                Some(&own)
            }
            (None, _) => None,
        };
        let shared = shared_expert_from(dev, x, w, pre)?;
        let shared_gate = as_bf16(dev, &w.shared_gate)?;
        let codes = match next {
            Some(n) if n.codes => Some(QuantizedX::alloc(dev, x.rows, hidden)?),
            _ => None,
        };
        let epilogue = SharedEpilogue {
            shared_gate: &shared_gate.buf,
            shared: &shared.buf,
            out: &out.buf,
            norm: next.map(|n| NormEpilogue {
                residual: &n.residual.buf,
                weight: &n.weight.buf,
                eps: n.eps,
                codes: codes.as_ref().map(|c| (&c.q, &c.s)),
            }),
        };
        let l = call(x, &logits, experts, spec, &out.buf);
        let mut stage = |s| {
            mark(stage_name(s));
            Ok(())
        };
        match native {
            Some(scales) => {
                routed_experts_fp8_from(dev, &l, local, scales, Some(&epilogue), pre, &mut stage)?
            }
            None => routed_experts_shared_marked(dev, &l, local, imp, &epilogue, &mut stage)
                .map_err(dev_err)?,
        }
        if next.is_none() {
            return Ok(MoeOut::Block(out));
        }
        let mut normed = out;
        normed.fp8 = codes.map(Box::new);
        return Ok(MoeOut::Normed(normed));
    }
    // The fallback kernels, overwriting `routed`.
    let routed = alloc(dev, x.elems().max(1) * 4)?;
    let l = call(x, &logits, experts, spec, &routed);
    routed_experts(dev, &l, local)?;
    mark("shared");
    let shared = shared_expert(dev, x, w)?;
    mark("glue");
    let gate = linear(dev, x, &w.shared_gate, Dtype::F32)?;
    combine(
        dev,
        "moe_combine_bf16",
        x,
        &routed,
        &shared,
        &gate,
        out.ptr(),
    )?;
    mark("end");
    Ok(MoeOut::Block(out))
}

/// The scales of `w`'s FP8 experts where the native FP8 grouped GEMMs take
/// the call: both matrices FP8 with one scale grid per expert, the shape
/// [`native_takes`] accepts on this device, and the grouped-GEMM path's
/// shape ([`moe_fast_path`]: its combine adds the shared expert).
fn native_fp8<'a>(
    dev: &CudaDevice,
    w: &'a MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    hidden: usize,
) -> Option<Fp8ExpertScales<'a>> {
    let n = spec.local_experts;
    if !native_takes(&dev.arch, hidden, spec.intermediate)
        || !moe_fast_path(hidden, spec.intermediate)
    {
        return None;
    }
    let (gu, dn) = (experts_of(&w.gate_up, n)?, experts_of(&w.down, n)?);
    let shapes =
        (gu.n, gu.k, dn.n, dn.k) == (2 * spec.intermediate, hidden, hidden, spec.intermediate);
    shapes.then_some(Fp8ExpertScales {
        gate_up: gu.scale_inv,
        down: dn.scale_inv,
    })
}

/// `out = routed + sigmoid(gate) · shared` over `x`'s rows (`gate` one f32
/// per row, `shared` bf16, `routed` f32 `[rows][hidden]`) by `entry`:
/// `moe_combine_bf16` (bf16 `out`) or `moe_combine_partial_f32` (f32 `out`,
/// which may be `routed`).
pub(super) fn combine(
    dev: &CudaDevice,
    entry: &'static str,
    x: &CudaAct,
    routed: &DeviceBuffer,
    shared: &CudaAct,
    gate: &CudaAct,
    out: u64,
) -> OpResult<()> {
    let n = x.elems();
    if n == 0 {
        return Ok(());
    }
    let args = Args::new()
        .ptr(routed.ptr())
        .ptr(shared.ptr())
        .ptr(gate.ptr())
        .ptr(out)
        .i64(n as i64)
        .i32(super::launch::int("moe", "hidden", x.cols)?);
    // SAFETY: routed and out hold n elements (f32, or the entry's output
    // dtype), shared n bf16, gate one f32 per row; the kernels read each
    // element of `routed` before writing the same element of `out`.
    unsafe { launch(dev, entry, stride_grid(n, 256), 256, args) }
}
