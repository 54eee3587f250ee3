#!/usr/bin/env bash
# On the GPU machine: FP8 checkpoints kept FP8 on the CUDA device (issue #26), by section:
#  build     cargo builds the test binaries and headroom (skip with prebuilt ones);
#  tests     crates/cuda/tests/fp8_backend.rs (FP8 upload form and bytes, linear /
#            linear_many at 1..300 rows, the MoE block on FP8 experts at decode and
#            prefill rows, vs f64: `fp8_linear:` / `fp8_moe:` lines; the norms'
#            FP8 codes: equal to the quantization kernel's, the GEMMs and the
#            MoE block on them bit for bit) and
#            crates/engine/tests/cuda_fp8.rs (the transformers FP8 fixture on CUDA vs
#            transformers and vs its bf16 twin, prefill 40 / 294 rows and 6 decode
#            steps; tiny-d64-fp8 vs tiny-d64 device bytes and vs the CPU; the 35B-A3B
#            FP8 preset's device bytes (<= 36 GB) and a prefill + decode: `fp8_model:`
#            lines; `fp8_moe_timing:` the 35B MoE block at 1..64 rows on each path);
#            then the regressions fp8_ops (with the probe of cuBLASLt at small k:
#            `fp8_probe: m 40|300` lines), decode_moe (the bf16 decode path's gate
#            changed);
#  memcheck  compute-sanitizer memcheck on the FP8 MoE test;
#  model     the 35B-A3B FP8 synthetic preset end to end: weight bytes on the device
#            (bar <= 36 GB), TTFT at 8k and 32k, decode after them; the bf16 preset
#            beside it.
# Usage: bench/gpu/check_fp8wire.sh [SECTION...]   (default: build tests model)
#   FP8WIRE_TIMING=0 skips the MoE timing test; FP8WIRE_PRESETS picks the model presets.
# Results go to $OUT (or ./gpu-out): fp8wire.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
SECTIONS=${*:-build tests model}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/fp8wire.log"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
status=0
bin() { ls -t target/release/deps/"$1"-* 2>/dev/null | grep -v '\.d$' | head -n1; }
HR=target/release/headroom

for section in $SECTIONS; do
case $section in
build)
    echo "=== build ==="
    cargo test --release -p headroom-cuda --test fp8_backend --test fp8_ops --test decode_moe --no-run 2>&1 | tail -n 3
    cargo test --release -p headroom-engine --test cuda_fp8 --no-run 2>&1 | tail -n 3
    cargo build --release -p headroom 2>&1 | tail -n 2
    ;;
tests)
    for t in fp8_backend cuda_fp8; do
        echo "=== tests: $t ==="
        # FP8WIRE_TIMING=0 skips fp8_moe_timing (about 40 s of host weights).
        skip=()
        [ "${FP8WIRE_TIMING:-1}" = 0 ] && skip=(--skip fp8_moe_timing)
        timeout 400 "$(bin $t)" --ignored --test-threads=1 --nocapture ${skip[@]+"${skip[@]}"} 2>&1 | tee -a "$LOG" \
            | grep -E "^test |fp8_linear|fp8_moe|fp8_model|test result|panicked|left|right"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    echo "=== regressions: fp8_ops, decode_moe ==="
    timeout 300 "$(bin fp8_ops)" --ignored --test-threads=1 --skip timing --nocapture 2>&1 \
        | tee -a "$LOG" | grep -E "fp8_probe: m (40|300) |test result|panicked"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    timeout 300 "$(bin decode_moe)" --ignored --test-threads=1 --skip timing 2>&1 | tee -a "$LOG" \
        | grep -E "test result|panicked"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
memcheck)
    echo "=== memcheck: the MoE block on FP8 experts ==="
    timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 \
        "$(bin fp8_backend)" --ignored --exact the_moe_block_on_fp8_experts_matches_f64_on_decode_and_prefill_rows \
        2>&1 | tee -a "$LOG" | tail -n 6
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    ;;
model)
    # FP8WIRE_PRESETS: the presets to run (default both).
    for preset in ${FP8WIRE_PRESETS:-qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b}; do
        echo "=== $preset: weights on the device, TTFT 8k / 32k, decode ==="
        timeout 300 "$HR" --attn-execution fused bench ttft --backend cuda --synthetic "$preset" \
            --lengths 8192,32768 --iterations 1 --warmup 1 --decode 64 \
            --json "$OUT/fp8wire-$preset.json" 2>&1 | tee -a "$LOG" \
            | grep -Ei "model loaded|weight|ttft|decode|tok/s|error" | grep -v "run [0-9]"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
echo "check_fp8wire: status $status"
exit $status
