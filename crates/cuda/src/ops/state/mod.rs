//! Slot-state copies in one launch ([`copy_ranges`]): a prefix-cache hit
//! (or a snapshot) copies every GDN layer's conv and recurrent state of one
//! slot over another's, which as one `cuMemcpyDtoDAsync` per range cost the
//! host ~6.8 µs each — 60 ranges, 0.41 ms of a follow-up turn's planning on
//! an H200 host (docs/perf/serving.md, session 5).

pub(crate) mod sources;

use crate::device::CudaDevice;
use crate::launch::{grid_dim, launch, upload, Args, GRID_X, GRID_YZ};
use headroom_core::ops::{OpError, OpResult};

/// Bytes one block copies (`CHUNK` in the kernel).
const CHUNK: usize = 64 * 1024;
const THREADS: u32 = 256;

/// One device range copy: `bytes` bytes from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeCopy {
    pub src: u64,
    pub dst: u64,
    pub bytes: usize,
}

/// Queues `ranges` as one launch (ranges of 0 bytes or `src == dst` are
/// dropped). The ranges must lie in live device buffers; ranges that
/// overlap one another (a write over another range's read or write) are
/// refused.
pub fn copy_ranges(dev: &CudaDevice, ranges: &[RangeCopy]) -> OpResult<()> {
    let op = "copy_ranges";
    let live = checked(ranges)?;
    if live.is_empty() {
        return Ok(());
    }
    let table: Vec<u64> = live
        .iter()
        .flat_map(|r| [r.src, r.dst, r.bytes as u64])
        .collect();
    let longest = live.iter().map(|r| r.bytes).max().unwrap_or(0);
    let grid = (
        grid_dim(op, longest.div_ceil(CHUNK), GRID_X)?,
        grid_dim(op, live.len(), GRID_YZ)?,
        1,
    );
    let table = upload(dev, &table)?;
    // SAFETY: each triple names a range inside a live device buffer (the
    // callers' contract); the grid covers each range in CHUNK-byte blocks.
    unsafe {
        launch(
            dev,
            "copy_ranges",
            grid,
            THREADS,
            Args::new().ptr(table.ptr()),
        )
    }
}

/// The ranges that copy something, or an error when a write overlaps
/// another range (or its own read), or a range wraps the address space.
fn checked(ranges: &[RangeCopy]) -> OpResult<Vec<RangeCopy>> {
    let op = "copy_ranges";
    let live: Vec<RangeCopy> = ranges
        .iter()
        .copied()
        .filter(|r| r.bytes > 0 && r.src != r.dst)
        .collect();
    let span = |at: u64, bytes: usize| {
        at.checked_add(bytes as u64)
            .map(|end| (at, end))
            .ok_or_else(|| OpError::shape(op, "a range wraps the address space"))
    };
    let meet = |a: (u64, u64), b: (u64, u64)| a.0 < b.1 && b.0 < a.1;
    for (i, a) in live.iter().enumerate() {
        let (a_src, a_dst) = (span(a.src, a.bytes)?, span(a.dst, a.bytes)?);
        if meet(a_src, a_dst) {
            return Err(OpError::shape(op, format!("range {i} overlaps itself")));
        }
        for (j, b) in live.iter().enumerate().skip(i + 1) {
            let (b_src, b_dst) = (span(b.src, b.bytes)?, span(b.dst, b.bytes)?);
            if meet(a_dst, b_dst) || meet(a_dst, b_src) || meet(a_src, b_dst) {
                return Err(OpError::shape(op, format!("ranges {i} and {j} overlap")));
            }
        }
    }
    Ok(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(src: u64, dst: u64, bytes: usize) -> RangeCopy {
        RangeCopy { src, dst, bytes }
    }

    #[test]
    fn empty_ranges_are_dropped_and_overlaps_refused() {
        let ok = [
            r(0, 1000, 100),
            r(100, 2000, 50),
            r(5000, 5000, 10),
            r(7, 9000, 0),
        ];
        assert_eq!(checked(&ok).unwrap(), vec![ok[0], ok[1]]);
        // Reads may share bytes; a write may not meet any other range.
        assert!(checked(&[r(0, 1000, 100), r(0, 2000, 100)]).is_ok());
        assert!(checked(&[r(0, 1000, 100), r(500, 1099, 10)]).is_err());
        assert!(checked(&[r(0, 1000, 100), r(1050, 3000, 10)]).is_err());
        assert!(checked(&[r(0, 1000, 100), r(3000, 50, 10)]).is_err());
        assert!(checked(&[r(0, 50, 100)]).is_err());
        assert!(checked(&[r(u64::MAX - 10, 0, 100)]).is_err());
    }
}
