#!/usr/bin/env bash
# On the GPU machine, in one call: the CudaBackend op tests
# (crates/cuda/tests/backend_ops.rs, ignored elsewhere: each op against an f64
# host reference, NaN-poisoned outputs, varlen batches with history, state
# across chunks, GQA 16/2 at head dim 256, sampling), one test at a time, then
# compute-sanitizer memcheck on the small case that launches every kernel;
# then steps recorded as CUDA graphs (crates/cuda/tests/graphs.rs: the eager
# bits capture after capture, a read refused inside a capture, the host's
# cost of a recorded step printed) with a memcheck of the first.
# Results go to $OUT (or ./gpu-out).
# Build the test binaries with
#   cargo test --release -p headroom-cuda --test backend_ops --test graphs --no-run
# Usage: bench/gpu/check_backend_ops.sh [backend_ops test binary] [graphs test binary]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-$(ls -t target/release/deps/backend_ops-* 2>/dev/null | grep -v '\.d$' | head -n1)}
GRAPHS=${2:-$(ls -t target/release/deps/graphs-* 2>/dev/null | grep -v '\.d$' | head -n1)}
[ -x "$BIN" ] || { echo "check_backend_ops: no test binary (build it: see the header)"; exit 1; }
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv
status=0

echo "=== backend op tests (--ignored, one thread) ==="
timeout 240 "$BIN" --ignored --test-threads=1 2>&1 | tee "$OUT/backend_ops.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "=== compute-sanitizer memcheck: sampling::small_every_kernel_once, then each fused:: test ==="
if command -v compute-sanitizer >/dev/null; then
    for t in sampling::small_every_kernel_once \
        fused::conv1d_k4x8_matches_cpu_across_strips_sequences_and_calls \
        fused::conv1d_narrow_channels_keep_the_one_channel_kernel \
        fused::gated_attention_equals_attention_then_gate_and_matches_cpu \
        fused::group_norms_match_cpu_on_both_kernels_and_nan_stays_in_its_group \
        dense::f32_residual_add_norm_matches_f64; do
        echo "--- $t"
        timeout 120 compute-sanitizer --tool memcheck --print-limit 6 --error-exitcode 9 \
            "$BIN" --ignored --exact "$t" 2>&1 | grep -E "=====|test result|panicked" | head -n 40
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED: $t"; status=1; }
    done
else
    echo "compute-sanitizer not found"; status=1
fi
echo "=== steps recorded as CUDA graphs ==="
if [ -x "$GRAPHS" ]; then
    timeout 200 "$GRAPHS" --ignored --nocapture --test-threads=1 2>&1 | tee "$OUT/graphs.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "graph tests FAILED"; status=1; }
    if command -v compute-sanitizer >/dev/null; then
        timeout 120 compute-sanitizer --tool memcheck --print-limit 6 --error-exitcode 9 \
            "$GRAPHS" --ignored --exact recorded_embeddings_give_the_eager_bits_capture_after_capture 2>&1 |
            grep -E "=====|test result|panicked" | head -n 40
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED: graphs"; status=1; }
    fi
else
    echo "graph tests FAILED: no graphs test binary"; status=1
fi
echo "check_backend_ops: status $status"
exit $status
