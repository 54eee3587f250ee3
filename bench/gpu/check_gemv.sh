#!/usr/bin/env bash
# On the GPU machine, in one call: the skinny GEMV (crates/cuda/src/ops/gemv/)
#  tests   tests/gemv.rs (f64 reference, NaN-poisoned outputs, rows 1..8, tails,
#          NaN row, linear_many == linear) and compute-sanitizer memcheck on its
#          small case;
#  bench   the GEMV beside cuBLAS on the 35B-A3B decode shapes (us, GB/s);
#  decode  decode tok/s after 8k and 32k prompts (35B-A3B shape, engine, fused
#          attention) with HEADROOM_DECODE_STATS=1, binaries side by side
#          (GEMV_BINS, default "new:BIN_DIR/headroom"; e.g. "old:OLD/headroom
#          new:BIN_DIR/headroom"), DECODE_PASSES times (default 1).
# Binaries (built elsewhere) in $BIN_DIR: headroom and gemv-* (the test binary).
# Usage: check_gemv.sh BIN_DIR [SECTION...]   (default: tests bench decode)
# Results go to $OUT (or ./gpu-out): tests.log, bench.log, decode.log (written as they
# come: a call cut short still returns what ran) and json.tgz (each arm's JSON).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_gemv.sh BIN_DIR [tests|bench|decode]...}
shift
SECTIONS=${*:-tests bench decode}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOGS=$OUT
JSON=$(mktemp -d)  # the arms' JSON, returned as one json.tgz ($OUT takes 8 files)
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
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
decode)
    BINS=${GEMV_BINS:-"new:$HR"}
    echo "=== decode after 8k and 32k (35B-A3B shape, engine, fused attention) ==="
    for pass in $(seq 1 "${DECODE_PASSES:-1}"); do
        for a in $BINS; do
            name=${a%%:*}; bin=${a#*:}
            echo "--- pass $pass arm $name ($bin)"
            HEADROOM_DECODE_STATS=1 timeout 100 "$bin" --attn-execution fused \
                bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
                --iterations 1 --warmup 0 --decode 64 --json "$JSON/decode-$name-$pass.json" 2>&1 \
                | tee -a "$LOGS/decode.log" | grep -E "decode|tok/s" | grep -v "run [0-9]"
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        done
    done
    tar -czf "$OUT/json.tgz" -C "$JSON" .
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
echo "check_gemv: status $status"
exit $status
