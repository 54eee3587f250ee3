#!/usr/bin/env bash
# On the GPU machine, in one call: the routed-experts checks against the f64
# host reference (crates/cuda/tests/moe.rs: small shapes at 1/7/100/333 tokens,
# the 35B-A3B shape at 512 tokens, chunked passes, ties, a NaN router row,
# bitwise reproducibility; the backend's whole MoE op, crates/cuda/tests/moe/block.rs),
# each on every grouped-GEMM kernel family the device runs (GemmImpl: MmaSync,
# and on sm_90a Wgmma and Ws, each forced, then the default per-pass choice),
# the timing of the 35B-A3B shape at 2k/8k/32k tokens (routed block and the
# whole MoE op per family; CUDA events, median of 7), and compute-sanitizer
# memcheck on small cases. Logs go to $OUT (or ./gpu-out). NCU_KERNELS (name
# regexes) adds ncu sections of one 32k-token launch per kernel.
# Usage: bench/gpu/check_moe.sh [path/to/moe-test-binary]
#   (cargo test --release -p headroom-cuda --test moe --no-run prints its path)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-$(ls -t target/release/deps/moe-* 2>/dev/null | grep -v '\.d$' | head -n1)}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
status=0

echo "=== correctness (f64 host reference) ==="
timeout ${CHECK_S:-150} "$BIN" --ignored --test-threads=1 --nocapture --skip bench_the_35b --skip timing_ 2>&1 | tee "$OUT/moe_check.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "correctness FAILED"; status=1; }

echo "=== timing: 35B-A3B shape (h 2048, 256 experts, top-8, i 512) ==="
timeout ${BENCH_S:-90} "$BIN" --ignored --nocapture --exact bench_the_35b_shape 2>&1 | tee "$OUT/moe_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "timing FAILED"; status=1; }
echo "=== timing: the whole MoE op (router, shared expert, routed experts) ==="
timeout ${BENCH_S:-90} "$BIN" --ignored --nocapture --exact block::bench_the_35b_moe_op 2>&1 | tee "$OUT/moe_op_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "op timing FAILED"; status=1; }

echo "=== compute-sanitizer memcheck (7 tokens, 8 experts) ==="
if command -v compute-sanitizer >/dev/null; then
    timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --ignored --exact sanitizer_case 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    echo "--- memcheck: the MoE op of a rank holding 8 of 16 experts (67 tokens), every kernel family ---"
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --ignored --exact \
        block::the_moe_op_of_a_rank_holding_some_experts_matches 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck (op) FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi
# Optional: hardware counters of one 32k-token launch per kernel (NCU_KERNELS:
# name regexes; the routed-block bench's 19th launch of a kernel name is its
# first at 32k tokens).
if [ -n "${NCU_KERNELS:-}" ] && command -v ncu >/dev/null; then
    for k in $NCU_KERNELS; do
        echo "=== ncu: $k ==="
        timeout ${NCU_S:-60} ncu --clock-control none -k "regex:$k" --launch-skip 18 --launch-count 1 \
            --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
            --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
            "$BIN" --ignored --nocapture --exact bench_the_35b_shape 2>&1 | grep -v "^|" >> "$OUT/moe_ncu.log"
        tail -n 5 "$OUT/moe_ncu.log"
    done
fi
echo "check_moe: status $status"
exit $status
