#!/usr/bin/env bash
# The MoE decode kernels (branch moestream) on the GPU machine, by section:
#  tests     tests/decode_moe.rs but the timing and the 35B rows sweep: both
#            kernel sets (the weight streams, the default, and the GEMV
#            kernels) against an f64 reference on NaN-poisoned outputs (35B
#            shape at 1, 3, 8 rows, the fixtures' blocks, tails, expert
#            slices, ties, NaN rows);
#  tests35b  the 35B shape at every row count 1..=8, both sets, against f64;
#  memcheck  compute-sanitizer memcheck on two small cases (every set: the
#            tails case runs the GEMV kernels and all four streaming variants);
#  timing    moe_decode_timing: each kernel's median µs and TB/s, and the whole
#            block back to back (median of 7 x 200 calls), every set and the
#            grouped-GEMM path side by side at 1, 2, 4 and 8 rows of the 35B shape;
#  ncu       Nsight Compute on each decode kernel at one row, every set (not in
#            the default sections).
# Usage: bench/gpu/check_moestream.sh BIN [tests|tests35b|memcheck|timing|ncu]...
#   BIN: the decode_moe test binary (cargo test --release -p headroom-cuda
#   --test decode_moe --no-run prints its path). Each section runs < 3 minutes.
# Logs go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:?usage: check_moestream.sh DECODE_MOE_BIN [tests|memcheck|timing]...}
shift
SECTIONS=${*:-tests tests35b memcheck timing}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
status=0
for section in $SECTIONS; do
case $section in
tests)
    echo "=== tests: decode_moe (all but the timing and the 35B rows sweep) ==="
    timeout 170 "$BIN" --ignored --test-threads=1 --nocapture --skip moe_decode_timing \
        --skip stream::both_kernel_sets 2>&1 \
        | tee "$OUT/moestream-tests.log" | grep -E "^test |rel err|vs f64|panicked|test result"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
tests35b)
    echo "=== tests: the 35B shape at 1..=8 rows, both kernel sets ==="
    timeout 170 "$BIN" --ignored --exact --nocapture \
        stream::both_kernel_sets_match_f64_at_the_35b_shape_for_1_to_8_rows 2>&1 \
        | tee "$OUT/moestream-tests35b.log" | grep -E "^test |vs f64|panicked|test result"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
memcheck)
    echo "=== memcheck: decode_moe small cases ==="
    for t in small_shapes_with_tails_and_expert_parallel_slices_match_f64 \
        stream::tied_router_rows_pick_the_lower_expert; do
        timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 \
            "$BIN" --ignored --exact "$t" 2>&1 | tail -n 4
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED: $t"; status=1; }
    done
    ;;
timing)
    echo "=== timing: moe_decode_timing ==="
    timeout 170 "$BIN" --ignored --exact timing::moe_decode_timing --nocapture 2>&1 \
        | tee "$OUT/moestream-timing.log" | grep -E "moe_decode_timing|panicked|test result"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
ncu)
    echo "=== ncu: each decode kernel at one row (2 calls of each set) ==="
    timeout 170 ncu --clock-control none -k regex:moe_decode_ \
        --section SpeedOfLight --section Occupancy --section WarpStateStats \
        --section MemoryWorkloadAnalysis \
        "$BIN" --ignored --exact timing::moe_decode_profile_once 2>&1 \
        | tee "$OUT/moestream-ncu.log" \
        | grep -E "moe_decode_[a-z_]+|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Limit|Stall|L2 Hit|test result" \
        | head -n 400
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
exit $status
