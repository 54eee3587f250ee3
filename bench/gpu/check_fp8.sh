#!/usr/bin/env bash
# On the GPU machine, in one call: the block-scaled FP8 ops (crates/cuda/src/ops/fp8/,
# crates/cuda/src/blas/fp8.rs), by section:
#  tests     tests/fp8_ops.rs against f64 (GEMV 1..8 rows with tails, quantization
#            and dequantization exact, GEMM m = 1/37/512 on cuBLASLt and on the bf16
#            fallback, NaN-poisoned outputs), with the probe of the scale order
#            cuBLASLt reads (`fp8_probe:` lines) and the path each GEMM took
#            (`fp8_gemm:` lines);
#  memcheck  compute-sanitizer memcheck on the small case of every kernel;
#  timing    the FP8 GEMV at one row beside the bf16 GEMV on the 35B-A3B shapes
#            (us, GB/s) and the FP8 GEMM beside cuBLAS bf16 at 8,192 rows
#            (TFLOP/s) (`fp8_timing:` lines).
# Builds nothing: the test binary fp8_ops-* (built elsewhere, e.g. `cargo test
# --release -p headroom-cuda --test fp8_ops --no-run`) is in BIN_DIR.
# Usage: bench/gpu/check_fp8.sh BIN_DIR [SECTION...]   (default: tests memcheck timing)
# Results go to $OUT (or ./gpu-out): fp8.log (written as it comes).
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_fp8.sh BIN_DIR [tests|memcheck|timing]...}
shift
SECTIONS=${*:-tests memcheck timing}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/fp8.log"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
status=0
T=$(ls "$BIN_DIR"/fp8_ops-* 2>/dev/null | grep -v '\.d$' | head -n1)
[ -n "$T" ] || { echo "check_fp8: no fp8_ops-* test binary in $BIN_DIR"; exit 1; }

for section in $SECTIONS; do
case $section in
tests)
    echo "=== tests: fp8_ops ==="
    timeout 300 "$T" --include-ignored --test-threads=1 --skip timing --nocapture 2>&1 \
        | tee -a "$LOG" | grep -E "^test |fp8_probe|fp8_gemm|test result|panicked|left|right"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
memcheck)
    echo "=== memcheck: small case ==="
    if command -v compute-sanitizer >/dev/null; then
        timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 \
            "$T" --ignored --exact small_case_for_memcheck 2>&1 | tee -a "$LOG" | tail -n 6
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    else
        echo "compute-sanitizer not found"; status=1
    fi
    ;;
timing)
    echo "=== timing: FP8 GEMV vs bf16 GEMV, FP8 GEMM vs cuBLAS bf16 ==="
    timeout 300 "$T" --ignored --test-threads=1 --nocapture timing 2>&1 \
        | tee -a "$LOG" | grep -E "fp8_timing|test result|panicked"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
echo "check_fp8: status $status"
exit $status
