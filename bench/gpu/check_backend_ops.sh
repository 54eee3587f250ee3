#!/usr/bin/env bash
# On the GPU machine, in one call: the CudaBackend op tests
# (crates/cuda/tests/backend_ops.rs, ignored elsewhere: each op against an f64
# host reference, NaN-poisoned outputs, varlen batches with history, state
# across chunks, GQA 16/2 at head dim 256, sampling), one test at a time, then
# compute-sanitizer memcheck on the small case that launches every kernel.
# Results go to $OUT (or ./gpu-out).
# Build the test binary with
#   cargo test --release -p headroom-cuda --test backend_ops --no-run
# Usage: bench/gpu/check_backend_ops.sh [path/to/backend_ops test binary]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-$(ls -t target/release/deps/backend_ops-* 2>/dev/null | grep -v '\.d$' | head -n1)}
[ -x "$BIN" ] || { echo "check_backend_ops: no test binary (build it: see the header)"; exit 1; }
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv
status=0

echo "=== backend op tests (--ignored, one thread) ==="
timeout 240 "$BIN" --ignored --test-threads=1 2>&1 | tee "$OUT/backend_ops.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "=== compute-sanitizer memcheck: sampling::small_every_kernel_once ==="
if command -v compute-sanitizer >/dev/null; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$BIN" --ignored --exact sampling::small_every_kernel_once 2>&1 | tail -n 8
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi
echo "check_backend_ops: status $status"
exit $status
