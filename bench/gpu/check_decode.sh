#!/usr/bin/env bash
# On the GPU machine, in one call (issue 9, decode and short-chunk attention):
#  1. the split-KV / packed-GQA attention tests (crates/cuda/tests/attention_split.rs,
#     f64 reference, NaN-poisoned outputs) and the existing prefill attention tests
#     (tests/gpu.rs) and backend attention-over-cache test, then compute-sanitizer
#     memcheck on the small split case;
#  2. attention TFLOP/s: 512 rows after 32,256 and 2,048 after 30,720 (16/2, d256,
#     bf16), split schedule forced off (HEADROOM_ATTN_SPLITS=1) and automatic;
#  3. decode tokens/s after 2k and 32k prompts on the 40-layer 35B-A3B shape, with
#     the per-part breakdown of profiled decode steps.
# Binaries (built elsewhere) in $BIN_DIR: headroom, attention_split-*, gpu-*, backend_ops-*.
# Usage: bench/gpu/check_decode.sh BIN_DIR        Results go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_decode.sh BIN_DIR}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
unset HEADROOM_ATTN_SPLITS
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
status=0
HR="$BIN_DIR/headroom"
pick() { ls "$BIN_DIR"/$1-* 2>/dev/null | grep -v '\.d$' | head -n1; }
SPLIT=$(pick attention_split); GPU=$(pick gpu); OPS=$(pick backend_ops)

echo "=== tests: attention_split ==="
timeout 60 "$SPLIT" --ignored --test-threads=1 --nocapture 2>&1 | tee "$OUT/tests.log" | tail -n 30
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "=== attention TFLOP/s (fused, 16/2, d256, bf16) ==="
for splits in 1 auto; do
    for lh in "512 32256" "2048 30720"; do
        set -- $lh
        echo "--- splits=$splits q_len=$1 history=$2"
        if [ "$splits" = auto ]; then unset HEADROOM_ATTN_SPLITS; else export HEADROOM_ATTN_SPLITS=$splits; fi
        timeout 30 "$HR" bench attention --backend cuda --lengths "$1" --history "$2" --routes fused \
            --iterations 10 --warmup 2 --json "$OUT/attn_${splits}_$1.json" 2>&1 | tail -n 4
    done
done
unset HEADROOM_ATTN_SPLITS

echo "=== decode after 2k and 32k prompts (35B-A3B shape, 40 layers) ==="
timeout 150 "$HR" bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 \
    --iterations 1 --warmup 0 --decode 64 --breakdown --json "$OUT/ttft.json" 2>&1 | tee "$OUT/ttft.log" | grep -v "run [0-9]"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "=== tests: gpu.rs (prefill attention) and backend attention over the cache ==="
timeout 40 "$GPU" --ignored --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | tail -n 5
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 40 "$OPS" --ignored --test-threads=1 attention 2>&1 | tee -a "$OUT/tests.log" | tail -n 5
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

echo "=== compute-sanitizer memcheck: small split case ==="
if command -v compute-sanitizer >/dev/null; then
    timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$SPLIT" --ignored --exact small_split_case_for_memcheck 2>&1 | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
else
    echo "compute-sanitizer not found"; status=1
fi

echo "check_decode: status $status"
exit $status
