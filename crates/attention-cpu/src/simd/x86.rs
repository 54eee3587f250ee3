//! AVX2+FMA versions of the softmax row kernels (x86-64 only), 8 lanes wide.
//! Same arithmetic as the portable ones in the parent module.

use std::arch::x86_64::*;

/// Maximum of `xs`, skipping NaN; `-inf` when empty or all NaN.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn row_max(xs: &[f32]) -> f32 {
    let mut acc = _mm256_set1_ps(f32::NEG_INFINITY);
    let chunks = xs.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        // SAFETY: `c` holds exactly 8 floats.
        let x = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        // max_ps returns the second operand when either is NaN: keep `acc`.
        acc = _mm256_max_ps(x, acc);
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds exactly 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut m = f32::NEG_INFINITY;
    for &x in lanes.iter().chain(tail) {
        m = if x > m { x } else { m };
    }
    m
}

#[inline(always)]
unsafe fn exp8(x: __m256) -> __m256 {
    let lo = _mm256_set1_ps(-87.0);
    let hi = _mm256_set1_ps(88.0);
    // min/max with the constant second: NaN lanes become the constant here, so
    // NaN is re-injected below through the `x` compare.
    let xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    let shifter = _mm256_set1_ps(12_582_912.0);
    let t = _mm256_fmadd_ps(xc, _mm256_set1_ps(std::f32::consts::LOG2_E), shifter);
    let n = _mm256_sub_ps(t, shifter);
    let n_bits = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(shifter));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), xc);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.121_944_4e-4), r);
    let mut p = _mm256_set1_ps(1.987_569_1e-4);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.398_2e-3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.333_452e-3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.166_579_6e-2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.666_666_5e-1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5));
    let r2 = _mm256_mul_ps(r, r);
    let e = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0));
    let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
        n_bits,
        _mm256_set1_epi32(127),
    )));
    let y = _mm256_mul_ps(e, pow2);
    // Below -87: exactly 0. NaN input: NaN (unordered compare picks x + x).
    let under = _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo);
    let y = _mm256_andnot_ps(under, y);
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    _mm256_blendv_ps(y, _mm256_add_ps(x, x), nan)
}

/// `xs[j] = e^(xs[j] - m)` in place; returns the sum.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(crate) unsafe fn exp_sub_sum(xs: &mut [f32], m: f32) -> f32 {
    let mv = _mm256_set1_ps(m);
    let mut acc = _mm256_setzero_ps();
    let mut chunks = xs.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` holds exactly 8 floats.
        unsafe {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), mv));
            _mm256_storeu_ps(c.as_mut_ptr(), e);
            acc = _mm256_add_ps(acc, e);
        }
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds exactly 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
    let mut sum: f32 = lanes.iter().sum();
    for x in chunks.into_remainder() {
        *x = super::exp(*x - m);
        sum += *x;
    }
    sum
}
