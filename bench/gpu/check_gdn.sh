#!/usr/bin/env bash
# On the GPU machine, in one call: the gated-delta-rule tests (f64 recurrent
# reference, fresh random inputs, NaN-poisoned outputs; lengths 1/37/64/65/300,
# varlen batches with slots and initial state, decode batches, chunk-split
# invariance, the Qwen3.6-35B-A3B dims at t=2048, NaN containment) with the
# scan at both widths, then the timing of the 35B-A3B shape at t = 2048, 8192,
# 32768 (CUDA events, median of 7, ms per layer; both scan widths and the scan
# ablations; prep alone and the scan as the difference), compute-sanitizer
# memcheck on small cases, with GDN_RACECHECK=1 racecheck on one small case,
# and ncu sections of the chunked kernels at t = 32768 (GDN_NCU_VARIANTS
# picks the bench cases; GDN_NCU=0 skips them).
# Results go to $OUT (or ./gpu-out).
# Every check and timing runs the prep with each scan width (`ScanWidth`:
# Narrow, Wide, and Full on sm_90a); GDN_CHECK_WIDTHS=narrow, wide, full or a
# comma list limits the correctness tests to those. The bench ends with the
# widths' crossover over batches of equal sequences (GDN_BENCH_CROSS), which
# `scan_width_for` follows.
# Usage: bench/gpu/check_gdn.sh [path/to/the gdn test binary]
#   (build it with `cargo test --release -p headroom-cuda --test gdn --no-run`)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-$(ls -t target/release/deps/gdn-* 2>/dev/null | grep -v '\.d$' | head -n1)}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
status=0

echo "=== correctness (f64 reference; both scan widths) ==="
timeout "${GDN_TEST_TIMEOUT:-240}" "$BIN" --ignored --test-threads 1 --skip bench_ 2>&1 | tee "$OUT/gdn-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "tests FAILED"; status=1; }

echo "=== timing: Qwen3.6-35B-A3B GDN layer (hk 16, hv 32, d 128) ==="
timeout "${GDN_BENCH_TIMEOUT:-150}" "$BIN" --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 | tee "$OUT/gdn-bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench FAILED"; status=1; }

echo "=== compute-sanitizer memcheck (small cases) ==="
if command -v compute-sanitizer >/dev/null; then
    timeout "${GDN_MEMCHECK_TIMEOUT:-60}" compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --ignored --test-threads 1 \
        varlen_batch_with_slots_gqa_and_initial_state decode_batch_runs_every_sequence_in_one_call 2>&1 \
        | tee "$OUT/gdn-memcheck.txt" | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi

if [ -n "${GDN_RACECHECK:-}" ] && command -v compute-sanitizer >/dev/null; then
    echo "=== compute-sanitizer racecheck (one small case) ==="
    timeout "${GDN_RACECHECK_TIMEOUT:-60}" compute-sanitizer --tool racecheck --error-exitcode 9 "$BIN" --ignored --test-threads 1 \
        --exact varlen_batch_with_slots_gqa_and_initial_state 2>&1 | tee "$OUT/gdn-racecheck.txt" | tail -n 6
    echo "racecheck rc ${PIPESTATUS[0]}"
fi

echo "=== ncu sections at t=32768 (${GDN_NCU_VARIANTS:=prep-alone,scan-Narrow,scan-Wide,scan-Full,scan-Wide-8seq,scan-Full-8seq}) ==="
if [ "${GDN_NCU:-1}" = 0 ]; then
    echo "skipped (GDN_NCU=0)"
elif command -v ncu >/dev/null; then
    GDN_BENCH_T=32768 GDN_BENCH_REPS=1 GDN_BENCH_VARIANTS=$GDN_NCU_VARIANTS timeout "${GDN_NCU_TIMEOUT:-120}" ncu \
        --clock-control none --kernel-name regex:gdn_chunk --launch-skip "${GDN_NCU_SKIP:-2}" --launch-count "${GDN_NCU_COUNT:-40}" \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section LaunchStats "$BIN" --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture \
        > "$OUT/gdn-ncu.txt" 2>&1
    echo "ncu rc $?"
    grep -E "^  gdn_|Duration|Memory Throughput|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers Per|Theoretical Occupancy|gdn_bench" "$OUT/gdn-ncu.txt" | head -n 120
else
    echo "ncu not found"
fi
echo "check_gdn: status $status"
exit $status
