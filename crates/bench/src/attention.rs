//! The backend-generic attention A/B runner.
//!
//! For each length: fresh random inputs (seeded), rounded to the bench dtype
//! on the host so the reference sees exactly what the backend stores; one
//! warm-up run of every route arm; then `iterations` rounds that run every arm
//! once each, round-robin (so drift on a shared machine hits every arm alike).
//! Per arm: median and min ms, GFLOP/s from [`CAUSAL_FLOP_FORMULA`], the
//! transient bytes and route/query block the backend *reported*, and the
//! relative Frobenius error against the f64 reference on the checked subset
//! ([`CHECKED_SUBSET`]), taken from the first measured run. An optional
//! yardstick (the CPU's square GEMM) runs once per round after the arms.

use crate::backend::AttentionBenchBackend;
use crate::run_counter::RunCounter;
use crate::schema::{AttentionBenchFile, AttentionSample, ATTENTION_SCHEMA};
use anyhow::{bail, ensure, Context};
use half::{bf16, f16};
use headroom_attention_cpu::{reference_f64_subset, rel_frobenius_error};
use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};
use headroom_hardware::HardwareFingerprint;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::Range;

/// How GFLOP/s are counted (printed with every table).
pub const CAUSAL_FLOP_FORMULA: &str =
    "FLOPs = 4 * q_heads * head_dim * sum_i(history + i + 1), i < length (QK^T and PV, causal keys only)";

/// What the error check covers.
pub const CHECKED_SUBSET: &str = "query heads 0 and q_heads-1 (the max of the two), \
     the first and the last 64 query rows (all when length <= 128)";

/// Rows at each end of the sequence the reference checks.
const CHECK_ROWS: usize = 64;

/// One bench invocation.
#[derive(Debug, Clone)]
pub struct AttentionBenchConfig {
    pub head_dim: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub dtype: Dtype,
    pub lengths: Vec<usize>,
    pub history: usize,
    pub routes: Vec<RouteRequest>,
    pub iterations: usize,
    pub warmup: usize,
    pub seed: u64,
}

/// The largest `head_dim` the bench accepts.
pub const MAX_HEAD_DIM: usize = 1024;
/// The largest head count (query or key/value) the bench accepts.
pub const MAX_HEADS: usize = 1024;

impl AttentionBenchConfig {
    /// The shape of one length (`kv_len` saturates; [`Self::validate`] refuses overflow).
    pub fn shape(&self, length: usize) -> AttentionShape {
        AttentionShape {
            q_len: length,
            kv_len: length.saturating_add(self.history),
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            scale: None,
        }
    }

    /// Host bytes one length needs, with checked arithmetic (`None` on
    /// overflow): q, k, v and the output as f32 on the host, the same again
    /// for the backend's copies, the reference's f64 subset, and the largest
    /// composed score block (`threads` blocks of query block × kv_len f32).
    pub fn bytes_needed(&self, length: usize, threads: usize) -> Option<u64> {
        let u = |x: usize| x as u64;
        let kv_len = u(length).checked_add(u(self.history))?;
        let q = u(self.q_heads)
            .checked_mul(u(length))?
            .checked_mul(u(self.head_dim))?;
        let kv = u(self.kv_heads)
            .checked_mul(kv_len)?
            .checked_mul(u(self.head_dim))?;
        let tensors = q.checked_mul(2)?.checked_add(kv.checked_mul(2)?)?;
        let widest_block = self
            .routes
            .iter()
            .map(|r| match r {
                RouteRequest::Composed { query_block } if *query_block > 0 => {
                    u(*query_block).min(u(length))
                }
                RouteRequest::Composed { .. } => u(length),
                RouteRequest::Fused => 0,
            })
            .max()
            .unwrap_or(0);
        let scores = widest_block
            .checked_mul(kv_len)?
            .checked_mul(u(threads.max(1)))?;
        tensors
            .checked_mul(8)? // host f32 + backend copy
            .checked_add(scores.checked_mul(4)?)
    }

    /// Checks every size before anything is allocated: flags in range, no
    /// overflow, and each length's memory within `available` bytes (when known).
    pub fn validate_with_memory(&self, available: Option<u64>) -> anyhow::Result<()> {
        ensure!(!self.lengths.is_empty(), "no --lengths given");
        ensure!(!self.routes.is_empty(), "no --routes given");
        ensure!(self.iterations >= 1, "--iterations must be >= 1");
        ensure!(
            (1..=MAX_HEAD_DIM).contains(&self.head_dim),
            "--head-dim {} is not in 1..={MAX_HEAD_DIM}",
            self.head_dim
        );
        for (flag, v) in [("--q-heads", self.q_heads), ("--kv-heads", self.kv_heads)] {
            ensure!(
                (1..=MAX_HEADS).contains(&v),
                "{flag} {v} is not in 1..={MAX_HEADS}"
            );
        }
        let threads = rayon::current_num_threads();
        for &l in &self.lengths {
            ensure!(
                l.checked_add(self.history).is_some(),
                "--history {} plus length {l} overflows",
                self.history
            );
            self.shape(l)
                .validate()
                .with_context(|| format!("length {l}"))?;
            let needed = self.bytes_needed(l, threads);
            match (needed, available) {
                (None, _) => anyhow::bail!(
                    "length {l} (history {}): the sizes overflow 64-bit byte counts",
                    self.history
                ),
                (Some(n), Some(a)) if n > a => anyhow::bail!(
                    "length {l} (history {}, {} q heads, {} kv heads, head_dim {}) needs about {n} bytes \
                     ({:.1} GiB) of host memory; {a} bytes ({:.1} GiB) are available",
                    self.history,
                    self.q_heads,
                    self.kv_heads,
                    self.head_dim,
                    n as f64 / (1u64 << 30) as f64,
                    a as f64 / (1u64 << 30) as f64
                ),
                _ => {}
            }
        }
        Ok(())
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.validate_with_memory(headroom_hardware::available_memory_bytes())
    }
}

/// The median of `xs` (sorted in place); NaN when empty.
pub fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

/// Runs every (length, route) arm on `backend` and returns the evidence.
pub fn run(
    cfg: &AttentionBenchConfig,
    backend: &mut dyn AttentionBenchBackend,
    hardware: HardwareFingerprint,
) -> anyhow::Result<AttentionBenchFile> {
    Ok(run_with_yardstick(cfg, backend, hardware, None)?.0)
}

/// A reference workload timed in the same rounds as the arms; returns ms.
pub type Yardstick<'a> = &'a mut dyn FnMut() -> f64;

/// [`run`], also timing `yardstick` once per warm-up and measured round
/// (after the arms); returns its measured times too.
pub fn run_with_yardstick(
    cfg: &AttentionBenchConfig,
    backend: &mut dyn AttentionBenchBackend,
    hardware: HardwareFingerprint,
    mut yardstick: Option<Yardstick<'_>>,
) -> anyhow::Result<(AttentionBenchFile, Vec<f64>)> {
    cfg.validate()?;
    let mut yard_times = Vec::new();
    let per_length = (cfg.warmup + cfg.iterations) * cfg.routes.len();
    let mut bar = RunCounter::new(
        "bench attention",
        per_length * cfg.lengths.len(),
        "runs",
        &format!("{} attention bench", backend.name()),
    );
    let mut samples = Vec::new();
    for (li, &length) in cfg.lengths.iter().enumerate() {
        let shape = cfg.shape(length);
        let msg = format!("{} attention, length {length}", backend.name());
        let (q, k, v) = inputs(&shape, cfg.dtype, cfg.seed.wrapping_add(li as u64));
        backend
            .load(&shape, cfg.dtype, &q, &k, &v)
            .with_context(|| format!("{}: load length {length}", backend.name()))?;
        let check = Check::new(&shape, &q, &k, &v);
        for _ in 0..cfg.warmup {
            for &route in &cfg.routes {
                run_once(backend, route, length)?;
                bar.inc(&msg);
            }
            if let Some(y) = yardstick.as_mut() {
                y();
            }
        }
        let mut arms: Vec<Arm> = cfg.routes.iter().map(|_| Arm::default()).collect();
        for it in 0..cfg.iterations {
            for (arm, &route) in arms.iter_mut().zip(&cfg.routes) {
                let (ms, report) = run_once(backend, route, length)?;
                if let Some(first) = arm.report {
                    ensure!(
                        first == report,
                        "{route} at length {length}: the backend ran {report:?} after {first:?}"
                    );
                }
                arm.report = Some(report);
                arm.times.push(ms);
                if it == 0 {
                    arm.rel_err = check.rel_err(&backend.output()?);
                }
                bar.inc(&msg);
            }
            if let Some(y) = yardstick.as_mut() {
                yard_times.push(y());
            }
        }
        for (arm, &route) in arms.iter_mut().zip(&cfg.routes) {
            let report = arm.report.with_context(|| format!("{route}: no run"))?;
            let median_ms = median(&mut arm.times);
            samples.push(AttentionSample {
                backend: backend.name().to_string(),
                length,
                history: cfg.history,
                route: report.route,
                query_block: report.query_block,
                dtype: cfg.dtype,
                head_dim: cfg.head_dim,
                q_heads: cfg.q_heads,
                kv_heads: cfg.kv_heads,
                iterations: cfg.iterations,
                median_ms,
                min_ms: arm.times.iter().copied().fold(f64::INFINITY, f64::min),
                gflops: shape.causal_flops() / (median_ms * 1e-3) / 1e9,
                transient_bytes: report.transient_bytes,
                rel_err: arm.rel_err,
            });
        }
    }
    bar.finish("attention bench done");
    let file = AttentionBenchFile {
        schema: ATTENTION_SCHEMA.to_string(),
        hardware,
        samples,
    };
    Ok((file, yard_times))
}

#[derive(Default)]
struct Arm {
    times: Vec<f64>,
    report: Option<AttentionReport>,
    rel_err: Option<f64>,
}

fn run_once(
    backend: &mut dyn AttentionBenchBackend,
    route: RouteRequest,
    length: usize,
) -> anyhow::Result<(f64, AttentionReport)> {
    let (ms, report) = backend
        .run(route)
        .with_context(|| format!("{}: {route} at length {length}", backend.name()))?;
    if !(ms.is_finite() && ms >= 0.0) {
        bail!("{}: {route} reported time {ms} ms", backend.name());
    }
    Ok((ms, report))
}

/// Uniform inputs of unit variance, rounded to `dtype` so the host reference
/// sees exactly the stored values.
pub fn inputs(shape: &AttentionShape, dtype: Dtype, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let bound = 3.0f32.sqrt();
    let mut gen = |n: usize| -> Vec<f32> {
        (0..n)
            .map(|_| round_to(dtype, rng.random_range(-bound..bound)))
            .collect()
    };
    let q = gen(shape.q_elems());
    let k = gen(shape.kv_elems());
    let v = gen(shape.kv_elems());
    (q, k, v)
}

fn round_to(dtype: Dtype, x: f32) -> f32 {
    match dtype {
        Dtype::F32 => x,
        Dtype::F16 => f16::from_f32(x).to_f32(),
        Dtype::Bf16 => bf16::from_f32(x).to_f32(),
    }
}

/// The f64 reference on the checked subset, computed once per length.
struct Check {
    shape: AttentionShape,
    heads: Vec<usize>,
    rows: Vec<Range<usize>>,
    reference: Vec<f64>,
}

impl Check {
    fn new(shape: &AttentionShape, q: &[f32], k: &[f32], v: &[f32]) -> Check {
        let mut heads = vec![0, shape.q_heads - 1];
        heads.dedup();
        let rows: Vec<Range<usize>> = if shape.q_len <= 2 * CHECK_ROWS {
            std::iter::once(0..shape.q_len).collect()
        } else {
            vec![0..CHECK_ROWS, shape.q_len - CHECK_ROWS..shape.q_len]
        };
        let mut reference = Vec::new();
        for &h in &heads {
            for r in &rows {
                reference.extend(reference_f64_subset(shape, q, k, v, &[h], r.clone()));
            }
        }
        Check {
            shape: *shape,
            heads,
            rows,
            reference,
        }
    }

    /// The largest per-head relative Frobenius error over the checked heads
    /// (each over that head's checked rows); `None` when the output is not
    /// finite on the subset.
    fn rel_err(&self, out: &[f32]) -> Option<f64> {
        let d = self.shape.head_dim;
        let per_head = self.reference.len() / self.heads.len();
        let mut worst = 0.0f64;
        for (hi, &h) in self.heads.iter().enumerate() {
            let mut got = Vec::with_capacity(per_head);
            for r in &self.rows {
                let start = (h * self.shape.q_len + r.start) * d;
                got.extend_from_slice(out.get(start..start + r.len() * d)?);
            }
            let reference = &self.reference[hi * per_head..(hi + 1) * per_head];
            if got.len() != reference.len() {
                return None;
            }
            let e = rel_frobenius_error(&got, reference);
            if !e.is_finite() {
                return None;
            }
            worst = worst.max(e);
        }
        Some(worst)
    }
}
