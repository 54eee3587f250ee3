#!/usr/bin/env bash
# On the GPU machine, in one call: the routed-experts checks against the f64
# host reference (crates/cuda/tests/moe.rs: small shapes at 1/7/100/333 tokens,
# the 35B-A3B shape at 512 tokens, chunked passes, ties, a NaN router row,
# bitwise reproducibility; the backend's whole MoE op, fused and unfused glue,
# crates/cuda/tests/moe/block.rs), the timing of the 35B-A3B shape at
# 2k/8k/32k tokens (routed block per grouped-GEMM kernel, and the whole MoE op
# per glue; CUDA events, median of 7), and compute-sanitizer memcheck on small
# cases. Logs go to $OUT (or ./gpu-out).
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
timeout ${CHECK_S:-150} "$BIN" --ignored --test-threads=1 --nocapture --skip bench_the_35b 2>&1 | tee "$OUT/moe_check.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "correctness FAILED"; status=1; }

echo "=== timing: 35B-A3B shape (h 2048, 256 experts, top-8, i 512) ==="
timeout ${BENCH_S:-90} "$BIN" --ignored --nocapture --exact bench_the_35b_shape 2>&1 | tee "$OUT/moe_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "timing FAILED"; status=1; }
echo "=== timing: the whole MoE op (router, shared expert, routed experts, glue) ==="
timeout ${BENCH_S:-90} "$BIN" --ignored --nocapture --exact block::bench_the_35b_moe_op 2>&1 | tee "$OUT/moe_op_bench.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "op timing FAILED"; status=1; }

echo "=== compute-sanitizer memcheck (7 tokens, 8 experts) ==="
if command -v compute-sanitizer >/dev/null; then
    timeout 50 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --ignored --exact sanitizer_case 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    echo "--- memcheck: the fused MoE op of a rank holding 8 of 16 experts (67 tokens) ---"
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --ignored --exact \
        block::the_fused_moe_op_of_a_rank_holding_some_experts_matches 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck (op) FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi
echo "check_moe: status $status"
exit $status
