//! One-launch range copies (`headroom_cuda::ops::state::copy_ranges`, what a
//! prefix-cache hit's slot resume queues): every range lands where it should
//! and nothing else is written, for 16-byte-aligned ranges longer than one
//! block's chunk and unaligned ones, against a host copy. Needs a GPU:
//! `cargo test --release -p headroom-cuda --test state_copy -- --ignored`.

use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::state::{copy_ranges, RangeCopy};

/// Bytes of a fixed pseudo-random pattern.
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn many_ranges_in_one_launch_equal_a_host_copy_and_touch_nothing_else() {
    let dev = CudaDevice::open(0).expect("a CUDA device");
    const MIB: usize = 1 << 20;
    let src_host = pattern(5 * MIB, 1);
    let src = dev.upload(&src_host).unwrap();
    let dst = dev.alloc(5 * MIB).unwrap();
    dev.fill_bytes(&dst, 0xFF).unwrap();
    // (src offset, dst offset, bytes): 30 "layers" of a 2 MiB-ish recurrent
    // state and a 48 KiB conv window would not fit here, so a mix: long
    // aligned ranges (several 64 KiB chunks, one not a multiple of a chunk),
    // short aligned ones, unaligned starts and lengths, an empty one.
    let mut spans = vec![
        (0usize, 0usize, 2 * MIB),
        (2 * MIB, 2 * MIB + 4096, MIB + 48 * 1024 + 16),
        (3 * MIB + 64 * 1024, 3 * MIB + 512 * 1024, 1000),
        (3 * MIB + 3, 3 * MIB + 600 * 1024 + 5, 70_001),
        (4 * MIB, 4 * MIB + 64, 0),
    ];
    for k in 0..40usize {
        spans.push((
            4 * MIB + k * 9000,
            4 * MIB + 100 * 1024 + k * 9000,
            8192 + k,
        ));
    }
    let ranges: Vec<RangeCopy> = spans
        .iter()
        .map(|&(s, d, n)| RangeCopy {
            src: src.ptr() + s as u64,
            dst: dst.ptr() + d as u64,
            bytes: n,
        })
        .collect();
    copy_ranges(&dev, &ranges).unwrap();
    let mut got = vec![0u8; 5 * MIB];
    dev.read(&dst, &mut got).unwrap();
    let mut want = vec![0xFFu8; 5 * MIB];
    for &(s, d, n) in &spans {
        want[d..d + n].copy_from_slice(&src_host[s..s + n]);
    }
    let first_bad = got.iter().zip(&want).position(|(a, b)| a != b);
    assert_eq!(first_bad, None, "first differing byte");
    // Overlapping writes are refused before anything is queued.
    let overlap = [
        RangeCopy {
            src: src.ptr(),
            dst: dst.ptr(),
            bytes: 100,
        },
        RangeCopy {
            src: src.ptr() + 200,
            dst: dst.ptr() + 50,
            bytes: 100,
        },
    ];
    assert!(copy_ranges(&dev, &overlap).is_err());
}
