//! Bad input: typed errors naming the offending dimension, never a panic.

mod common;

use common::shape;
use half::bf16;
use headroom_attention_cpu::attention_prefill;
use headroom_core::{AttentionError, AttentionShape, RouteRequest};

const ROUTES: [RouteRequest; 3] = [
    RouteRequest::Fused,
    RouteRequest::Composed { query_block: 0 },
    RouteRequest::Composed { query_block: 4 },
];

/// Calls with buffers sized for `sized` but the shape `claimed`.
fn call(
    claimed: &AttentionShape,
    sized: &AttentionShape,
    route: RouteRequest,
) -> Result<(), AttentionError> {
    let q = vec![bf16::ONE; sized.q_elems()];
    let k = vec![bf16::ONE; sized.kv_elems()];
    let v = vec![bf16::ONE; sized.kv_elems()];
    let mut out = vec![bf16::ZERO; sized.q_elems()];
    attention_prefill(claimed, route, &q, &k, &v, &mut out).map(|_| ())
}

#[test]
fn mismatched_buffers_name_the_buffer() {
    let s = shape(8, 10, 4, 2, 64);
    for route in ROUTES {
        for (buffer, dq, dk, dv, dout) in [
            ("q", 1, 0, 0, 0),
            ("k", 0, 64, 0, 0),
            ("v", 0, 0, 1, 0),
            ("out", 0, 0, 0, 3),
        ] {
            let q = vec![1.0f32; s.q_elems() - dq];
            let k = vec![1.0f32; s.kv_elems() + dk];
            let v = vec![1.0f32; s.kv_elems() - dv];
            let mut out = vec![0.0f32; s.q_elems() + dout];
            let err = attention_prefill(&s, route, &q, &k, &v, &mut out).unwrap_err();
            assert!(
                matches!(err, AttentionError::BufferLength { buffer: b, .. } if b == buffer),
                "{route}: {err}"
            );
            assert!(out.iter().all(|&o| o == 0.0), "nothing written on error");
        }
    }
}

#[test]
fn q_len_beyond_kv_len_is_refused() {
    let s = shape(12, 10, 2, 1, 64);
    for route in ROUTES {
        assert_eq!(
            call(&s, &s, route),
            Err(AttentionError::QueryLongerThanKv {
                q_len: 12,
                kv_len: 10
            })
        );
    }
}

#[test]
fn heads_not_divisible_are_refused() {
    let s = shape(4, 4, 6, 4, 64);
    for route in ROUTES {
        assert_eq!(
            call(&s, &s, route),
            Err(AttentionError::HeadsNotDivisible {
                q_heads: 6,
                kv_heads: 4
            })
        );
    }
}

#[test]
fn zero_dimensions_are_named() {
    for (s, dim) in [
        (shape(0, 4, 2, 1, 64), "q_len"),
        (shape(4, 4, 2, 0, 64), "kv_heads"),
        (shape(4, 4, 2, 1, 0), "head_dim"),
    ] {
        for route in ROUTES {
            assert_eq!(
                call(&s, &s, route),
                Err(AttentionError::ZeroDimension { dim })
            );
        }
    }
}

#[test]
fn fused_refuses_unsupported_head_dims_composed_runs_them() {
    for d in [32, 96, 80, 512] {
        let s = shape(5, 9, 2, 1, d);
        match call(&s, &s, RouteRequest::Fused) {
            Err(AttentionError::UnsupportedHeadDim {
                head_dim, route, ..
            }) => {
                assert_eq!((head_dim, route), (d, "fused"));
            }
            other => panic!("head_dim {d}: {other:?}"),
        }
        assert_eq!(
            call(&s, &s, RouteRequest::Composed { query_block: 2 }),
            Ok(())
        );
    }
}

#[test]
fn bad_scale_is_refused() {
    let mut s = shape(4, 4, 2, 1, 64);
    s.scale = Some(f32::NAN);
    for route in ROUTES {
        assert!(matches!(
            call(&s, &s, route),
            Err(AttentionError::BadScale(_))
        ));
    }
}
