//! The f64 reference: the numbers every attention route and backend is
//! compared against, and the relative Frobenius error used to compare them.

use headroom_core::{AttentionShape, Element};
use std::ops::Range;

/// Causal attention in f64 over the whole output, head-major
/// `[q_heads][q_len][head_dim]`. The caller validates the shape.
pub fn reference_f64<T: Element>(shape: &AttentionShape, q: &[T], k: &[T], v: &[T]) -> Vec<f64> {
    let heads: Vec<usize> = (0..shape.q_heads).collect();
    reference_f64_subset(shape, q, k, v, &heads, 0..shape.q_len)
}

/// Causal attention in f64 for the query `heads` listed and the query `rows`
/// given (indices into `0..q_len`): output `[heads.len()][rows.len()][head_dim]`.
///
/// Used to check a subset when the full reference is too expensive.
///
/// # Panics
/// If a head or row is out of range or a buffer is shorter than the shape.
pub fn reference_f64_subset<T: Element>(
    shape: &AttentionShape,
    q: &[T],
    k: &[T],
    v: &[T],
    heads: &[usize],
    rows: Range<usize>,
) -> Vec<f64> {
    let d = shape.head_dim;
    assert!(rows.end <= shape.q_len, "rows {rows:?} beyond q_len");
    assert!(
        q.len() >= shape.q_elems() && k.len() >= shape.kv_elems() && v.len() >= shape.kv_elems()
    );
    let scale = f64::from(shape.scale_or_default());
    let hist = shape.history();
    let mut out = Vec::with_capacity(heads.len() * rows.len() * d);
    let mut scores = vec![0.0f64; shape.kv_len];
    let mut acc = vec![0.0f64; d];
    for &h in heads {
        assert!(h < shape.q_heads, "head {h} beyond q_heads");
        let kvh = h / shape.group();
        let kh = &k[kvh * shape.kv_len * d..(kvh + 1) * shape.kv_len * d];
        let vh = &v[kvh * shape.kv_len * d..(kvh + 1) * shape.kv_len * d];
        for i in rows.clone() {
            let qrow = &q[(h * shape.q_len + i) * d..(h * shape.q_len + i + 1) * d];
            let visible = hist + i + 1;
            for (j, s) in scores[..visible].iter_mut().enumerate() {
                let krow = &kh[j * d..(j + 1) * d];
                let dot: f64 = qrow
                    .iter()
                    .zip(krow)
                    .map(|(a, b)| f64::from(a.to_f32()) * f64::from(b.to_f32()))
                    .sum();
                *s = dot * scale;
            }
            // The max skips NaN scores; exp(NaN - m) then makes the row's output NaN.
            let m = scores[..visible]
                .iter()
                .fold(f64::NEG_INFINITY, |m, &s| if s > m { s } else { m });
            acc.iter_mut().for_each(|a| *a = 0.0);
            let mut l = 0.0f64;
            for (j, &s) in scores[..visible].iter().enumerate() {
                let p = (s - m).exp();
                l += p;
                for (a, x) in acc.iter_mut().zip(&vh[j * d..(j + 1) * d]) {
                    *a += p * f64::from(x.to_f32());
                }
            }
            out.extend(acc.iter().map(|a| a / l));
        }
    }
    out
}

/// `‖out − reference‖_F / ‖reference‖_F` (the absolute norm when the
/// reference is all zeros). NaN when either side holds a NaN.
///
/// # Panics
/// If the lengths differ.
pub fn rel_frobenius_error<T: Element>(out: &[T], reference: &[f64]) -> f64 {
    assert_eq!(
        out.len(),
        reference.len(),
        "output and reference lengths differ"
    );
    let mut diff = 0.0f64;
    let mut norm = 0.0f64;
    for (o, r) in out.iter().zip(reference) {
        let e = f64::from(o.to_f32()) - r;
        diff += e * e;
        norm += r * r;
    }
    if norm > 0.0 {
        (diff / norm).sqrt()
    } else {
        diff.sqrt()
    }
}
