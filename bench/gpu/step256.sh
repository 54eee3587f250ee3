#!/usr/bin/env bash
# On the GPU machine (H200, sm_90a), in one call: the correctness tests the
# step256 changes touch (the MoE routing with its offsets and the scatter, the
# shared combine, both paged split combines) and then the timings of the
# 256-row follow-up step's ops (crates/cuda/tests/step256_timing.rs): the
# paged attention over 32k by split count and combine, decode attention of
# 64 / 256 sequences, the MoE routing and combine stages at 256 / 2k / 8k rows.
# Logs go to $OUT (or ./gpu-out).
# Usage: bench/gpu/step256.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
status=0
cargo test --release -p headroom-cuda --no-run 2>&1 | tail -n 3
for t in moe paged_attention attention_split backend_ops; do
    echo "=== $t ==="
    timeout 900 cargo test --release -p headroom-cuda --test "$t" -- --ignored --test-threads=1 \
        2>&1 | tee "$OUT/$t.log" | grep -E "^test |test result|panicked|rel err" | tail -n 40
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$t FAILED"; status=1; }
done
echo "=== step256_timing ==="
timeout 600 cargo test --release -p headroom-cuda --test step256_timing -- --ignored --nocapture \
    --test-threads=1 2>&1 | tee "$OUT/step256_timing.log" | grep -vE "^\s*(Compiling|Finished|Running)"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "step256_timing FAILED"; status=1; }
echo "step256: status $status"
exit $status
