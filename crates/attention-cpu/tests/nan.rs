//! NaN propagation: a NaN in an input reaches exactly the output rows whose
//! causal window reads it, in both routes, whatever the tiling.

mod common;

use common::{fresh_seed, inputs, routes, run, shape, Inputs};
use half::bf16;
use headroom_core::{AttentionShape, Element};

/// Row `i` (of every head in KV head 0's group) reads KV position `pos`.
fn reads(s: &AttentionShape, i: usize, pos: usize) -> bool {
    pos <= s.history() + i
}

fn assert_rows<T: Element>(
    s: &AttentionShape,
    out: &[T],
    nan_row: impl Fn(usize, usize) -> bool,
    ctx: &str,
) {
    let d = s.head_dim;
    for h in 0..s.q_heads {
        for i in 0..s.q_len {
            let row = &out[(h * s.q_len + i) * d..][..d];
            if nan_row(h, i) {
                assert!(
                    row.iter().all(|x| x.to_f32().is_nan()),
                    "{ctx}: head {h} row {i} should be NaN"
                );
            } else {
                assert!(
                    row.iter().all(|x| x.to_f32().is_finite()),
                    "{ctx}: head {h} row {i} should be finite"
                );
            }
        }
    }
}

/// One NaN element in a query or key row poisons the whole score.
fn set_elem<T: Element>(buf: &mut [T], row: usize, d: usize) {
    buf[row * d + d / 2] = T::from_f32(f32::NAN);
}

/// A value row is NaN in every column, so every output column that reads it is NaN.
fn set_row<T: Element>(buf: &mut [T], row: usize, d: usize) {
    buf[row * d..(row + 1) * d].fill(T::from_f32(f32::NAN));
}

fn kv_cases<T: Element>(s: &AttentionShape) {
    let seed = fresh_seed();
    // Positions: first, mid-tile, in the history, last.
    for pos in [0, s.history() / 2, s.history() + 3, s.kv_len - 1] {
        for in_value in [false, true] {
            let mut x: Inputs<T> = inputs(s, seed);
            // KV head 1 only; heads of KV head 0 must stay finite.
            let row = s.kv_len + pos;
            if in_value {
                set_row(&mut x.v, row, s.head_dim);
            } else {
                set_elem(&mut x.k, row, s.head_dim);
            }
            for route in routes(s.q_len) {
                let (out, _) = run(s, route, &x);
                let ctx = format!(
                    "{route} NaN in {} row {pos} seed {seed}",
                    if in_value { "v" } else { "k" }
                );
                assert_rows(s, &out, |h, i| h / s.group() == 1 && reads(s, i, pos), &ctx);
            }
        }
    }
}

#[test]
fn nan_key_or_value_row_reaches_only_rows_that_attend_to_it() {
    kv_cases::<f32>(&shape(70, 100, 4, 2, 64));
    kv_cases::<bf16>(&shape(70, 70, 4, 2, 128));
}

#[test]
fn nan_value_in_the_masked_triangle_does_not_leak_backwards() {
    // The NaN sits right after row 0's window: only later rows may see it.
    let s = shape(40, 40, 2, 1, 64);
    let seed = fresh_seed();
    let mut x: Inputs<f32> = inputs(&s, seed);
    set_row(&mut x.v, 1, s.head_dim);
    for route in routes(s.q_len) {
        let (out, _) = run(&s, route, &x);
        assert_rows(&s, &out, |_, i| i >= 1, &format!("{route} seed {seed}"));
    }
}

#[test]
fn nan_query_row_poisons_only_its_own_row() {
    let s = shape(50, 80, 4, 2, 64);
    let seed = fresh_seed();
    let mut x: Inputs<f32> = inputs(&s, seed);
    // Head 3, row 17.
    set_elem(&mut x.q, 3 * s.q_len + 17, s.head_dim);
    for route in routes(s.q_len) {
        let (out, _) = run(&s, route, &x);
        assert_rows(
            &s,
            &out,
            |h, i| h == 3 && i == 17,
            &format!("{route} seed {seed}"),
        );
    }
}
