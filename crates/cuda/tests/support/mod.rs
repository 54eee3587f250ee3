//! Helpers shared by several GPU test binaries of this crate (each includes
//! this module with `mod support;`).

/// Root-mean-square relative error of `got` against an f64 reference; every
/// output must be finite (a NaN-poisoned output the kernel did not write
/// fails here).
pub fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        assert!(g.is_finite(), "non-finite output where {w} was expected");
        num += (g as f64 - w).powi(2);
        den += w * w;
    }
    (num / den.max(1e-30)).sqrt()
}
