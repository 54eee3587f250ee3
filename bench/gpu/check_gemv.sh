#!/usr/bin/env bash
# On the GPU machine, in one call: the skinny GEMV (crates/cuda/src/backend/gemv.rs)
#  tests   tests/gemv.rs (f64 reference, NaN-poisoned outputs, rows 1..8, tails,
#          NaN row, linear_many == linear) and compute-sanitizer memcheck on its
#          small case;
#  bench   GEMV kernels beside cuBLAS on the 35B-A3B decode shapes (us, GB/s);
#  logits  one-layer 35B-A3B model fed one token per step, GEMV off vs on
#          (bench/gpu/compare_decode_logits.py, must be <= 2e-2);
#  decode  decode tok/s after 8k and 32k prompts (35B-A3B shape, engine, fused
#          attention) with HEADROOM_DECODE_STATS=1, arms side by side
#          (GEMV_ARMS, default "off:HEADROOM_GEMV=off on:"; on = the default kernel;
#          e.g. "off:HEADROOM_GEMV=off c2:HEADROOM_GEMV=c2 a1:HEADROOM_GEMV=a1"; an arm's
#          variables are comma-separated), DECODE_PASSES times (default 1);
#  breakdown  the per-part times of 16 profiled decode steps after 32k, GEMV off vs on.
# Binaries (built elsewhere) in $BIN_DIR: headroom and gemv-* (the test binary).
# Usage: check_gemv.sh BIN_DIR [SECTION...]   (default: tests bench logits decode breakdown)
# Results go to $OUT (or ./gpu-out): tests.log, bench.log, decode.log (written as they
# come: a call cut short still returns what ran) and json.tgz (each arm's JSON).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_gemv.sh BIN_DIR [tests|bench|logits|decode|breakdown]...}
shift
SECTIONS=${*:-tests bench logits decode breakdown}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOGS=$OUT
JSON=$(mktemp -d)  # the arms' JSON, returned as one json.tgz ($OUT takes 8 files)
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
unset HEADROOM_GEMV HEADROOM_MOE_DECODE HEADROOM_UPLOAD_CACHE
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
status=0
HR="$BIN_DIR/headroom"
T=$(ls "$BIN_DIR"/gemv-* 2>/dev/null | grep -v '\.d$' | head -n1)

for section in $SECTIONS; do
case $section in
tests)
    echo "=== tests: gemv ==="
    timeout 90 "$T" --ignored --test-threads=1 --skip bench 2>&1 | tee -a "$LOGS/tests.log" | tail -n 8
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "=== memcheck: small case ==="
    if command -v compute-sanitizer >/dev/null; then
        timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 \
            "$T" --ignored --exact small_case_for_memcheck 2>&1 | tee -a "$LOGS/tests.log" | tail -n 4
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    else
        echo "compute-sanitizer not found"; status=1
    fi
    ;;
bench)
    echo "=== bench: GEMV vs cuBLAS ==="
    timeout 90 "$T" --ignored --exact bench_gemv_vs_cublas --nocapture 2>&1 \
        | tee -a "$LOGS/bench.log" | grep -E "us per call|rows"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
logits)
    echo "=== one layer, one token per step: logits GEMV off vs on ==="
    python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 200000 for i in range(24)]))' > "$LOGS/ids.json"
    for arm in off on; do
        g=off; [ $arm = on ] && g=default
        HEADROOM_GEMV=$g timeout 60 "$HR" --attn-execution fused logits --backend cuda \
            --synthetic qwen3.6-35b-a3b:layers=1 --ids "$LOGS/ids.json" \
            --out "$LOGS/logits-$arm.safetensors" --chunk 1 2>&1 | tail -n 1
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    python3 bench/gpu/compare_decode_logits.py "$LOGS/logits-off.safetensors" \
        "$LOGS/logits-on.safetensors" 2e-2 || status=1
    rm -f "$LOGS"/logits-*.safetensors "$LOGS/ids.json"
    ;;
decode)
    ARMS=${GEMV_ARMS:-"off:HEADROOM_GEMV=off on:"}
    echo "=== decode after 8k and 32k (35B-A3B shape, engine, fused attention) ==="
    for pass in $(seq 1 "${DECODE_PASSES:-1}"); do
        for a in $ARMS; do
            name=${a%%:*}; envs=${a#*:}
            echo "--- pass $pass arm $name (${envs:-defaults})"
            env ${envs//,/ } HEADROOM_DECODE_STATS=1 timeout 100 "$HR" --attn-execution fused \
                bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
                --iterations 1 --warmup 0 --decode 64 --json "$JSON/decode-$name-$pass.json" 2>&1 \
                | tee -a "$LOGS/decode.log" | grep -E "decode|tok/s" | grep -v "run [0-9]"
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        done
    done
    tar -czf "$OUT/json.tgz" -C "$JSON" .
    ;;
breakdown)
    echo "=== per-part breakdown of profiled decode steps after 32k, GEMV off vs on ==="
    for arm in off on; do
        g=off; [ $arm = on ] && g=default
        echo "--- arm $arm"
        HEADROOM_GEMV=$g timeout 60 "$HR" --attn-execution fused bench ttft --backend cuda \
            --synthetic qwen3.6-35b-a3b --lengths 32768 --iterations 1 --warmup 0 --decode 16 \
            --breakdown --json "$JSON/breakdown-$arm.json" 2>&1 \
            | tee -a "$LOGS/decode.log" | grep -E "decode" | grep -v "run [0-9]"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    tar -czf "$OUT/json.tgz" -C "$JSON" .
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
echo "check_gemv: status $status"
exit $status
