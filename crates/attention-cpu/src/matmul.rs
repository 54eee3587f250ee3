//! A bounds-checked, single-threaded f32 GEMM over strided slices (the `gemm` crate).

/// A read-only matrix view: element `(r, c)` is `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// `c[m×n] (row-major, row stride ldc) = (accumulate ? c : 0) + a[m×k] · b[k×n]`.
///
/// # Panics
/// If a view is too short for its dimensions and strides (never reads out of bounds).
#[allow(clippy::too_many_arguments)] // the BLAS shape: dims, dst, mode, two operands
pub(crate) fn matmul(
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    a: Mat<'_>,
    b: Mat<'_>,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        n <= ldc && (m - 1) * ldc + n <= c.len(),
        "gemm: dst too short"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                c[r * ldc..r * ldc + n].fill(0.0);
            }
        }
        return;
    }
    assert!(
        (m - 1) * a.rs + (k - 1) * a.cs < a.data.len(),
        "gemm: lhs too short"
    );
    assert!(
        (k - 1) * b.rs + (n - 1) * b.cs < b.data.len(),
        "gemm: rhs too short"
    );
    // SAFETY: the asserts above keep every index the kernel touches inside the
    // three slices; `c` is borrowed mutably, so it cannot alias `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// Scores `s[m×n] = q[m×d] · k[n×d]ᵀ`: `m` query rows against `n` key rows,
/// all three row-major and contiguous.
#[inline]
pub(crate) fn q_kt(m: usize, n: usize, d: usize, s: &mut [f32], q: &[f32], k: &[f32]) {
    let q = Mat {
        data: q,
        rs: d,
        cs: 1,
    };
    let kt = Mat {
        data: k,
        rs: 1,
        cs: d,
    };
    matmul(m, n, d, s, n, false, q, kt);
}

/// `o[m×d] = (accumulate ? o : 0) + p[m×n] · v[n×d]`: probabilities (row
/// stride `ldp`) times value rows; `o` and `v` row-major and contiguous.
#[allow(clippy::too_many_arguments)] // dims, dst, mode, the strided lhs and the rhs
#[inline]
pub(crate) fn p_v(
    m: usize,
    n: usize,
    d: usize,
    o: &mut [f32],
    accumulate: bool,
    p: &[f32],
    ldp: usize,
    v: &[f32],
) {
    let p = Mat {
        data: p,
        rs: ldp,
        cs: 1,
    };
    let v = Mat {
        data: v,
        rs: d,
        cs: 1,
    };
    matmul(m, d, n, o, d, accumulate, p, v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplies_strided_views_and_accumulates() {
        // a = [[1,2],[3,4]] row-major; b = aᵀ given through column-major strides.
        let a = [1.0, 2.0, 3.0, 4.0];
        let lhs = Mat {
            data: &a,
            rs: 2,
            cs: 1,
        };
        let rhs = Mat {
            data: &a,
            rs: 1,
            cs: 2,
        };
        let mut c = [10.0f32; 4];
        matmul(2, 2, 2, &mut c, 2, false, lhs, rhs);
        assert_eq!(c, [5.0, 11.0, 11.0, 25.0]);
        matmul(2, 2, 2, &mut c, 2, true, lhs, rhs);
        assert_eq!(c, [10.0, 22.0, 22.0, 50.0]);
        matmul(2, 2, 0, &mut c, 2, false, lhs, rhs);
        assert_eq!(c, [0.0; 4]);
    }

    #[test]
    fn scores_and_probability_times_value_helpers() {
        // q = [[1,2],[3,4]], k = [[1,0],[1,1],[0,2]]: s = q·kᵀ.
        let q = [1.0, 2.0, 3.0, 4.0];
        let k = [1.0, 0.0, 1.0, 1.0, 0.0, 2.0];
        let mut s = [f32::NAN; 6];
        q_kt(2, 3, 2, &mut s, &q, &k);
        assert_eq!(s, [1.0, 3.0, 4.0, 3.0, 7.0, 8.0]);
        // The first 2 columns of s (row stride 3) times v = [[1,1],[0,2]], then accumulated.
        let v = [1.0, 1.0, 0.0, 2.0];
        let mut o = [f32::NAN; 4];
        p_v(2, 2, 2, &mut o, false, &s, 3, &v);
        assert_eq!(o, [1.0, 7.0, 3.0, 17.0]);
        p_v(2, 2, 2, &mut o, true, &s, 3, &v);
        assert_eq!(o, [2.0, 14.0, 6.0, 34.0]);
    }
}
