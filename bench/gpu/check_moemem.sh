#!/usr/bin/env bash
# On the GPU machine, in one call (builds nothing): the few-rows-per-expert
# grouped GEMMs (GemmImpl::Stream, moe_grouped_gemm_stream.cu) checked and timed.
#   1. correctness: every case of crates/cuda/tests/moe.rs (f64 host reference:
#      small shapes, 64/200/420 and 512 rows of the 35B shape, chunked passes,
#      ties, a NaN router row, bitwise reproducibility, the whole MoE op in
#      tests/moe/block.rs) on every kernel family, the streaming ones included;
#   2. compute-sanitizer memcheck on sanitizer_case (7 tokens, every family)
#      and on the MoE op of an expert-parallel rank;
#   3. timing (tests/moe_few_rows_timing.rs): gate+up and down µs and TB/s at
#      64/200/256/420/512/600/768/1024 rows x top-8 of 256 experts, old kernel
#      vs the streaming one; the whole MoE op at 2k/8k/32k rows on every family
#      (moe.rs block::bench_the_35b_moe_op: the default must not regress at 8k).
# Optional: NCU=1 adds ncu sections of one gate+up and one down launch of the
# streaming kernels at NCU_ROWS (default 512) rows.
# Build first (on the build machine):
#   cargo test --release -p headroom-cuda --test moe --test moe_few_rows_timing --no-run
# Usage: bench/gpu/check_moemem.sh [moe-test-binary] [moe_few_rows_timing-binary]
set -uo pipefail
cd "$(dirname "$0")/../.."
MOE=${1:-$(ls -t target/release/deps/moe-* 2>/dev/null | grep -v '\.d$' | head -n1)}
TIMING=${2:-$(ls -t target/release/deps/moe_few_rows_timing-* 2>/dev/null | grep -v '\.d$' | head -n1)}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
echo "binaries: $MOE $TIMING"
status=0

echo "=== timing: few rows per expert (35B shape) ==="
timeout ${BENCH_S:-150} "$TIMING" --ignored --nocapture --exact bench_few_rows_per_expert 2>&1 | tee "$OUT/moemem_timing.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "timing FAILED"; status=1; }
echo "=== timing: the whole MoE op at 2k / 8k / 32k rows ==="
timeout ${BENCH_S:-150} "$MOE" --ignored --nocapture --exact block::bench_the_35b_moe_op 2>&1 | tee "$OUT/moemem_op.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "op timing FAILED"; status=1; }

echo "=== correctness (f64 host reference, every kernel family) ==="
timeout ${CHECK_S:-300} "$MOE" --ignored --test-threads=1 --nocapture --skip bench_ 2>&1 | tee "$OUT/moemem_check.log" | grep -E "^test |rel err|vs f64|panicked|FAILED|test result" | grep -v "^test .* ok$" | tail -n 80
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "correctness FAILED"; status=1; }
grep -E "^test result" "$OUT/moemem_check.log"

echo "=== compute-sanitizer memcheck ==="
if command -v compute-sanitizer >/dev/null; then
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$MOE" --ignored --exact sanitizer_case 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$MOE" --ignored --exact \
        block::the_moe_op_of_a_rank_holding_some_experts_matches 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck (op) FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi

if [ -n "${NCU:-}" ] && command -v ncu >/dev/null; then
    for k in moe_gemm_gate_up_stream_bf16 moe_gemm_down_stream_bf16; do
        echo "=== ncu: $k (${NCU_ROWS:-512} rows) ==="
        MOEMEM_ROWS=${NCU_ROWS:-512} timeout ${NCU_S:-60} ncu --clock-control none -k "regex:$k" --launch-skip 3 --launch-count 1 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
            --section WarpStateStats "$TIMING" --ignored --nocapture --exact bench_few_rows_per_expert 2>&1 \
            | grep -v "^|" >> "$OUT/moemem_ncu.log"
        tail -n 5 "$OUT/moemem_ncu.log"
    done
fi
echo "check_moemem: status $status"
exit $status
