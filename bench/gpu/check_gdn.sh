#!/usr/bin/env bash
# On the GPU machine, in one call: the gated-delta-rule tests (f64 recurrent
# reference, fresh random inputs, NaN-poisoned outputs; lengths 1/37/64/65/300,
# varlen batches with slots and initial state, decode batches, chunk-split
# invariance, the Qwen3.6-35B-A3B dims at t=2048, NaN containment), then the
# timing of the 35B-A3B shape at t = 2048, 8192, 32768 (CUDA events, median
# of 7, ms per layer), then compute-sanitizer memcheck on small cases.
# Results go to $OUT (or ./gpu-out).
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

echo "=== correctness (f64 reference) ==="
timeout 100 "$BIN" --ignored --test-threads 1 --skip bench_ 2>&1 | tee "$OUT/gdn-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "tests FAILED"; status=1; }

echo "=== timing: Qwen3.6-35B-A3B GDN layer (hk 16, hv 32, d 128) ==="
timeout 80 "$BIN" --ignored --exact bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 | tee "$OUT/gdn-bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "bench FAILED"; status=1; }

echo "=== per-kernel device time at t=32768 (ncu, if present) ==="
if command -v ncu >/dev/null; then
    GDN_BENCH_T=32768 timeout 100 ncu --kernel-name regex:gdn_ --metrics gpu__time_duration.sum \
        "$BIN" --ignored --exact bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 \
        | grep -E "gdn_|gpu__time_duration" > "$OUT/gdn-ncu.txt"
    # Median device time per kernel (ncu fixes the clocks: slower than the events above).
    awk '/^  gdn_/{k=$1$2$3$4} /gpu__time_duration/{print k, $NF}' "$OUT/gdn-ncu.txt" | sort -k1,1 -k2,2n \
        | awk '{v[$1]=v[$1]" "$2; n[$1]++} END {for (k in v) {split(substr(v[k],2),a," "); print k, "median", a[int((n[k]+1)/2)], "ms over", n[k]}}'
    grep gdn_bench "$OUT/gdn-ncu.txt" || true
else
    echo "ncu not found"
fi

echo "=== compute-sanitizer memcheck (small cases) ==="
if command -v compute-sanitizer >/dev/null; then
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" --ignored --test-threads 1 \
        varlen_batch_with_slots_gqa_and_initial_state decode_batch_runs_every_sequence_in_one_call 2>&1 | tail -n 8
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi
echo "check_gdn: status $status"
exit $status
