//! Which entry of `moe_decode.cu` each decode launch runs (`decode.rs`
//! launches them): a weight format's entries by their suffix, the gate_up
//! entry and its columns a warp for the rows, the down entry with its tile
//! and threads, and where the tensor-core (mma.sync) entries take the shape
//! on the device ([`Mma`], [`gate_up_mma_takes`], [`down_mma_takes`]).
//! Host logic only, tested on the CPU (`decode_tests.rs`).

use super::{GATE_UP_COLS, GATE_UP_COLS_ROWS, THREADS, WARPS};

/// A weight format's entries, by their suffix ("" bf16, "_fp8", "_fp8_sbf16"):
/// gate_up at one row, gate_up from two rows (its `_rows` twin), and down.
pub(super) fn entries(suffix: &str) -> [&'static str; 3] {
    match suffix {
        "" => [
            "moe_decode_gate_up",
            "moe_decode_gate_up_rows",
            "moe_decode_down",
        ],
        "_fp8" => [
            "moe_decode_gate_up_fp8",
            "moe_decode_gate_up_fp8_rows",
            "moe_decode_down_fp8",
        ],
        _ => [
            "moe_decode_gate_up_fp8_sbf16",
            "moe_decode_gate_up_fp8_sbf16_rows",
            "moe_decode_down_fp8_sbf16",
        ],
    }
}

/// The gate_up entry of the format `suffix` for `rows` rows of `hidden` on a
/// device of `capability`, and its columns a warp (a CTA covers `8 · cols`):
/// where [`gate_up_mma_takes`], the tensor-core entry (24 columns a CTA at
/// one row, its `_rows` twin's 40 from two) of FP8 experts at every row
/// count and of bf16 ones at one row and from three rows (at two the FMA
/// `_rows` entry); else the format's one-row entry or its `_rows` twin.
pub(super) fn gate_up_for(
    suffix: &str,
    rows: usize,
    capability: (i32, i32),
    hidden: usize,
) -> (&'static str, usize) {
    // The tensor-core entries where they take the shape and were measured
    // faster (docs/perf/cuda-decode.md, session 21: bf16 at 2 rows the FMA
    // `_rows` entry keeps the lead).
    let mma = match suffix {
        "" if gate_up_mma_takes(Mma::Bf16, capability, hidden) => match rows {
            1 => Some(("moe_decode_gate_up_mma", GATE_UP_COLS)),
            2 => None,
            _ => Some(("moe_decode_gate_up_mma_rows", GATE_UP_COLS_ROWS)),
        },
        "_fp8" if gate_up_mma_takes(Mma::Fp8, capability, hidden) => Some(if rows == 1 {
            ("moe_decode_gate_up_fp8_mma", GATE_UP_COLS)
        } else {
            ("moe_decode_gate_up_fp8_mma_rows", GATE_UP_COLS_ROWS)
        }),
        _ => None,
    };
    if let Some(entry) = mma {
        return entry;
    }
    let [one, wide, _] = entries(suffix);
    if rows == 1 {
        (one, GATE_UP_COLS)
    } else {
        (wide, GATE_UP_COLS_ROWS)
    }
}

/// The down entry of the format `suffix` for `hidden`, `inter` and the
/// shared `shared_inter` on a device of `capability`, its output columns a
/// CTA and its threads: the tensor-core entry of bf16 or FP8 experts where
/// [`down_mma_takes`], else the format's entry (a warp a column).
pub(super) fn down_for(
    suffix: &str,
    capability: (i32, i32),
    hidden: usize,
    inter: usize,
    shared_inter: usize,
) -> (&'static str, usize, u32) {
    let mma = match suffix {
        "" => Some((Mma::Bf16, "moe_decode_down_mma")),
        "_fp8" => Some((Mma::Fp8, "moe_decode_down_fp8_mma")),
        _ => None,
    };
    match mma {
        Some((f, entry)) if down_mma_takes(f, capability, hidden, inter, shared_inter) => {
            (entry, f.down_tile(), DOWN_MMA_THREADS)
        }
        _ => (entries(suffix)[2], WARPS, THREADS),
    }
}

/// The weight format of a tensor-core decode kernel: bf16 weights are its A
/// operand as they are (mma.sync on bf16: sm_80+), e4m3 ones go through
/// sm_89's conversion instruction ([`E4M3_CVT_FROM`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Mma {
    Bf16,
    Fp8,
}

impl Mma {
    /// The first compute capability that runs the format's entries.
    fn first_capability(self) -> (i32, i32) {
        match self {
            Mma::Bf16 => (8, 0),
            Mma::Fp8 => E4M3_CVT_FROM,
        }
    }

    /// Output columns a CTA of the format's tensor-core down kernel computes.
    fn down_tile(self) -> usize {
        match self {
            Mma::Bf16 => DOWN_MMA_TILE_BF16,
            Mma::Fp8 => DOWN_MMA_TILE,
        }
    }

    /// Columns of hidden in one round of a warp (a lane's 16-byte chunk
    /// times the 4 lanes of a quad).
    fn round(self) -> usize {
        match self {
            Mma::Bf16 => 32,
            Mma::Fp8 => 64,
        }
    }
}

/// Output columns a CTA of the tensor-core down kernels computes (FP8
/// `DOWN_MMA_TILE`, bf16 `DOWN_BF_TILE`), their threads (`DOWN_MMA_THREADS`)
/// and the longest intermediate they take (`64 · DOWN_MMA_ROUNDS`, `64 ·
/// DOWN_BF_ROUNDS`).
pub(super) const DOWN_MMA_TILE: usize = 16;
pub(super) const DOWN_MMA_TILE_BF16: usize = 8;
pub(super) const DOWN_MMA_THREADS: u32 = 9 * 32;
pub(super) const DOWN_MMA_MAX_INTER: usize = 512;

/// The first compute capability with the e4m3 conversion instruction the
/// tensor-core FP8 kernels take their operands from (`HEADROOM_E4M3_CVT` in
/// `e4m3.cuh`; below it those entries are compiled to a trap).
const E4M3_CVT_FROM: (i32, i32) = (8, 9);

/// Whether the down kernel of `format` runs on the tensor cores
/// (`moe_decode_down_mma`, `moe_decode_down_fp8_mma`) on a device of
/// `capability`: whole output tiles and both intermediates whole 64-column
/// rounds (bf16: two halves of whole 32-column rounds) up to
/// [`DOWN_MMA_MAX_INTER`].
pub(super) fn down_mma_takes(
    format: Mma,
    capability: (i32, i32),
    hidden: usize,
    inter: usize,
    shared_inter: usize,
) -> bool {
    let rounds = |n: usize| n > 0 && n.is_multiple_of(64) && n <= DOWN_MMA_MAX_INTER;
    capability >= format.first_capability()
        && hidden.is_multiple_of(format.down_tile())
        && rounds(inter)
        && rounds(shared_inter)
}

/// Whether the gate_up of `format` runs on the tensor cores
/// (`moe_decode_gate_up_mma`, `moe_decode_gate_up_fp8_mma` and their
/// `_rows` twins) on a device of `capability`: hidden whole rounds
/// ([`Mma::round`]), at most 8 a warp of 8 for bf16 (two stages of
/// `GU_BF_STAGE`), 4 for FP8 (`GU_MMA_ROUNDS`).
pub(super) fn gate_up_mma_takes(format: Mma, capability: (i32, i32), hidden: usize) -> bool {
    let most = match format {
        Mma::Bf16 => 8,
        Mma::Fp8 => 4,
    };
    capability >= format.first_capability()
        && hidden > 0
        && hidden.is_multiple_of(format.round())
        && hidden <= most * format.round() * WARPS
}
