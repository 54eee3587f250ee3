//! The f32 row kernels of the softmax (max, exp-and-sum, scale, axpy) and the
//! CPU feature level the routes dispatch on.
//!
//! The helpers are `#[inline(always)]` and written in 8 independent lanes so
//! that, inlined into a task body compiled with `avx2,fma` (see
//! [`Level::detect`]), LLVM turns them into 8-wide vector code. The exp is a
//! branch-free polynomial (Cephes `expf` coefficients, ~1 ulp on the reduced
//! range) because libm's `expf` does not vectorize.

#[cfg(target_arch = "x86_64")]
mod x86;

/// What the running CPU offers the task bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// x86-64 with AVX2 and FMA: task bodies run in `avx2,fma` clones.
    Avx2,
    /// Anything else: the same code compiled for the baseline target.
    Baseline,
}

impl Level {
    pub(crate) fn detect() -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                return Level::Avx2;
            }
        }
        Level::Baseline
    }
}

/// Defines `dispatch(ctx, t, outs, s)` in the calling module: it runs that
/// module's `task` body in an `avx2,fma` clone when `ctx.level` is
/// [`Level::Avx2`], else as compiled for the baseline target. The module
/// provides `Ctx` (with a `level` field), `Task`, `OutRows`, `Scratch` and
/// an `#[inline(always)] fn task`.
macro_rules! feature_dispatch {
    () => {
        fn dispatch<T: Element>(ctx: &Ctx<'_, T>, t: Task, outs: &OutRows<'_, T>, s: &mut Scratch) {
            match ctx.level {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: Level::Avx2 is only returned when the CPU has AVX2 and FMA.
                Level::Avx2 => unsafe { task_avx2(ctx, t, outs, s) },
                _ => task(ctx, t, outs, s),
            }
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn task_avx2<T: Element>(
            ctx: &Ctx<'_, T>,
            t: Task,
            outs: &OutRows<'_, T>,
            s: &mut Scratch,
        ) {
            task(ctx, t, outs, s)
        }
    };
}
pub(crate) use feature_dispatch;

const LANES: usize = 8;

/// Maximum of `xs`, skipping NaN (a NaN score poisons its row later, through
/// `exp(NaN - m)`). `-inf` for an empty or all-NaN slice.
#[inline(always)]
pub(crate) fn row_max(level: Level, xs: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level == Level::Avx2 {
        // SAFETY: Level::Avx2 means the CPU has AVX2 and FMA.
        return unsafe { x86::row_max(xs) };
    }
    let _ = level;
    row_max_portable(xs)
}

#[inline(always)]
fn row_max_portable(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a = if x > *a { x } else { *a };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &x in acc.iter().chain(chunks.remainder()) {
        m = if x > m { x } else { m };
    }
    m
}

/// `e^x` for `x <= 0` (the softmax range) with a relative error of a few
/// ulp; exactly 0 below -87, NaN for NaN.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const SHIFTER: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let xc = if x < -87.0 { -87.0 } else { x };
    let xc = if xc > 88.0 { 88.0 } else { xc };
    let t = xc * LOG2E + SHIFTER;
    let n = t - SHIFTER;
    let n_bits = t.to_bits().wrapping_sub(SHIFTER.to_bits()) as i32;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    let pow2 = f32::from_bits((n_bits.wrapping_add(127) as u32) << 23);
    if x < -87.0 {
        0.0
    } else {
        e * pow2
    }
}

/// `xs[j] = e^(xs[j] - m)` in place; returns the sum.
#[inline(always)]
pub(crate) fn exp_sub_sum(level: Level, xs: &mut [f32], m: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level == Level::Avx2 {
        // SAFETY: Level::Avx2 means the CPU has AVX2 and FMA.
        return unsafe { x86::exp_sub_sum(xs, m) };
    }
    let _ = level;
    exp_sub_sum_portable(xs, m)
}

#[inline(always)]
fn exp_sub_sum_portable(xs: &mut [f32], m: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = xs.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (a, x) in acc.iter_mut().zip(c.iter_mut()) {
            *x = exp(*x - m);
            *a += *x;
        }
    }
    let mut sum = 0.0f32;
    for x in chunks.into_remainder() {
        *x = exp(*x - m);
        sum += *x;
    }
    acc.iter().sum::<f32>() + sum
}

/// `xs *= a`.
#[inline(always)]
pub(crate) fn scale(xs: &mut [f32], a: f32) {
    for x in xs {
        *x *= a;
    }
}

/// `ys += a * xs`.
#[inline(always)]
pub(crate) fn axpy(ys: &mut [f32], a: f32, xs: &[f32]) {
    for (y, &x) in ys.iter_mut().zip(xs) {
        *y += a * x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_on_the_softmax_range() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = -90.0 + 90.0 * i as f32 / 200_000.0;
            let want = f64::from(x).exp();
            let got = f64::from(exp(x));
            if x >= -87.0 {
                worst = worst.max(((got - want) / want).abs());
            } else {
                assert_eq!(got, 0.0, "x = {x}");
            }
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
    }

    fn levels() -> Vec<Level> {
        let mut l = vec![Level::Baseline];
        if Level::detect() != Level::Baseline {
            l.push(Level::detect());
        }
        l
    }

    #[test]
    fn row_max_skips_nan_and_reads_the_tail() {
        for level in levels() {
            let mut xs: Vec<f32> = (0..19).map(|i| i as f32 * 0.5 - 3.0).collect();
            xs[4] = f32::NAN;
            assert_eq!(row_max(level, &xs), 6.0, "{level:?}");
            xs[18] = 42.0;
            assert_eq!(row_max(level, &xs), 42.0, "{level:?}");
            xs[3] = 43.0;
            assert_eq!(row_max(level, &xs), 43.0, "{level:?}");
            assert_eq!(row_max(level, &[]), f32::NEG_INFINITY);
            assert_eq!(row_max(level, &[f32::NAN; 9]), f32::NEG_INFINITY);
        }
    }

    #[test]
    fn exp_sub_sum_writes_every_element_and_sums_them() {
        for level in levels() {
            let mut xs: Vec<f32> = (0..29).map(|i| -(i as f32) * 3.3).collect();
            xs[5] = f32::NEG_INFINITY;
            let before = xs.clone();
            let want: Vec<f64> = xs.iter().map(|&x| (f64::from(x) - 1.0).exp()).collect();
            let s = exp_sub_sum(level, &mut xs, 1.0);
            for (i, (g, w)) in xs.iter().zip(&want).enumerate() {
                let ok = if before[i] - 1.0 < -87.0 {
                    *g == 0.0
                } else {
                    (f64::from(*g) - w).abs() < 1e-6 * w
                };
                assert!(ok, "{level:?} [{i}]: {g} vs {w}");
            }
            assert!((f64::from(s) - want.iter().sum::<f64>()).abs() < 1e-5);
            let mut nan = [0.0f32, f32::NAN, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, f32::NAN];
            assert!(exp_sub_sum(level, &mut nan, 0.0).is_nan());
            assert!(
                nan[1].is_nan() && nan[8].is_nan() && nan[0] == 1.0,
                "{level:?}"
            );
        }
    }
}
