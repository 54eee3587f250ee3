//! The gated delta rule's launch validation (`ops::gdn::validate`) over
//! fake device memory: runs anywhere, no GPU (a module of `tests/gdn.rs`).

use super::*;

struct FakeMemory;
impl RawMemory for FakeMemory {
    fn malloc(&self, bytes: usize) -> Result<u64, CudaError> {
        Ok(0x1000 + bytes as u64)
    }
    fn free(&self, _ptr: u64) {}
}

/// Checks a launch over fake buffers sized for `t` rows and `slots` slots,
/// the buffer named `short` one byte short.
fn validate_with(
    d: Dims,
    t: usize,
    slots: usize,
    seqs: &[Seq],
    short: Option<&str>,
) -> Result<usize, CudaError> {
    let a = Allocator::new(Box::new(FakeMemory));
    let cut = |name: &str, bytes: usize| {
        if short == Some(name) {
            bytes - 1
        } else {
            bytes
        }
    };
    let qkv = a.alloc(cut("qkv", t * d.row() * 2))?;
    let g = a.alloc(cut("g", t * d.hv * 4))?;
    let beta = a.alloc(cut("beta", t * d.hv * 4))?;
    let state = a.alloc(cut("state", slots * d.slot_state() * 4))?;
    let out = a.alloc(cut("out", t * d.hv * d.dv * 2))?;
    let plan = validate(&GdnLaunch {
        qkv: &qkv,
        g: &g,
        beta: &beta,
        state: &state,
        out: &out,
        seqs,
        k_heads: d.hk,
        v_heads: d.hv,
        k_dim: d.dk,
        v_dim: d.dv,
    })?;
    Ok(plan.seqs.len())
}

fn invalid(r: Result<usize, CudaError>) -> String {
    match r {
        Err(CudaError::InvalidLaunch(m)) => m,
        other => panic!("expected InvalidLaunch, got {other:?}"),
    }
}

#[test]
fn a_valid_launch_plans_its_non_empty_sequences() {
    let seqs = [(0, 0, 300), (2, 300, 0), (1, 300, 1)];
    assert_eq!(validate_with(SMALL, 301, 3, &seqs, None).unwrap(), 2);
}

#[test]
fn sequences_past_the_buffers_are_rejected() {
    let m = invalid(validate_with(SMALL, 100, 2, &[(0, 50, 51)], None));
    assert!(m.contains("holds 100 rows"), "{m}");
    invalid(validate_with(SMALL, 100, 2, &[(0, usize::MAX, 2)], None));
}

#[test]
fn slots_out_of_range_or_shared_are_rejected() {
    let m = invalid(validate_with(SMALL, 100, 2, &[(2, 0, 10)], None));
    assert!(m.contains("slot 2"), "{m}");
    let m = invalid(validate_with(
        SMALL,
        100,
        2,
        &[(1, 0, 10), (1, 10, 10)],
        None,
    ));
    assert!(m.contains("two sequences"), "{m}");
}

#[test]
fn overlapping_sequences_are_rejected() {
    let m = invalid(validate_with(
        SMALL,
        100,
        2,
        &[(0, 0, 10), (1, 9, 10)],
        None,
    ));
    assert!(m.contains("overlap"), "{m}");
}

#[test]
fn every_short_buffer_is_rejected() {
    for name in ["qkv", "g", "beta", "out", "state"] {
        let m = invalid(validate_with(SMALL, 100, 2, &[(1, 0, 100)], Some(name)));
        assert!(m.contains(name) || name == "state", "{name}: {m}");
    }
}

#[test]
fn unsupported_dims_are_rejected() {
    let m = invalid(validate_with(
        Dims { hv: 3, ..SMALL },
        10,
        1,
        &[(0, 0, 10)],
        None,
    ));
    assert!(m.contains("multiple"), "{m}");
    let m = invalid(validate_with(
        Dims { dk: 64, ..SMALL },
        10,
        1,
        &[(0, 0, 10)],
        None,
    ));
    assert!(m.contains("support 128"), "{m}");
    invalid(validate_with(
        Dims { hk: 0, ..SMALL },
        10,
        1,
        &[(0, 0, 10)],
        None,
    ));
}
