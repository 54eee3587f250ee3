#!/usr/bin/env bash
# On the GPU machine, in one call: the fused decode paths of Backend::gdn_core
# (crates/cuda/src/ops/gdn/gdn_decode.cu) and Backend::attention_prep
# (attention_prep.cu), by section:
#  tests     tests/fused_decode.rs: fused vs the composed GPU path vs the CPU,
#            8 steps, GQA 1/2/3 and the 35B-A3B shapes, a NaN input (ignored tests);
#  memcheck  compute-sanitizer memcheck on the small case of both kernels;
#  timing    device and wall time per call, composed vs fused, batch 1;
#  logits    the whole synthetic 35B-A3B model (1 layer) fed a 24-token prompt
#            one token per step (`logits --chunk 1`, the fused paths) against the
#            same prompt as one prefill chunk (the chunked paths), compared
#            (bench/gpu/compare_decode_logits.py, printed); and the transformers
#            fixtures at chunk 1 (fused attention prep: their GDN head dim 16
#            keeps the composition) against the CPU f32 run (bar 2e-2);
#  decode    decode tok/s after 8k and 32k prompts (35B-A3B shape, engine, fused
#            attention), with HEADROOM_DECODE_STATS=1.
# The fused paths are the only decode paths (their switches are retired:
# docs/perf/cleanup-cuda-gdnmoe.md); tests/fused_decode.rs compares them with
# the composition. SKIP_FIXTURES=1 leaves out the fixtures part of `logits`.
# Binaries (built elsewhere) in BIN_DIR: headroom and fused_decode-*.
# Usage: bench/gpu/check_gdn_decode.sh BIN_DIR [SECTION...]   (default: all five)
# Results go to $OUT (or ./gpu-out): gdn-decode.log and the JSON of each decode arm.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_gdn_decode.sh BIN_DIR [tests|memcheck|timing|logits|decode]...}
shift
SECTIONS=${*:-tests memcheck timing logits decode}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/gdn-decode.log"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
status=0
HR="$BIN_DIR/headroom"
T=$(ls "$BIN_DIR"/fused_decode-* 2>/dev/null | grep -v '\.d$' | head -n1)

for section in $SECTIONS; do
case $section in
tests)
    echo "=== tests: fused_decode ===" | tee -a "$LOG"
    timeout 150 "$T" --ignored --test-threads=1 --nocapture --skip timing 2>&1 | tee -a "$LOG" \
        | grep -E "step 7|test |result|panicked|error" | tail -n 40
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
memcheck)
    echo "=== memcheck: small case (both kernels) ===" | tee -a "$LOG"
    if command -v compute-sanitizer >/dev/null; then
        timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 \
            "$T" --ignored --exact small_case_for_memcheck 2>&1 | tee -a "$LOG" | tail -n 6
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED"; status=1; }
    else
        echo "compute-sanitizer not found"; status=1
    fi
    ;;
timing)
    echo "=== timing: composed vs fused, batch 1 ===" | tee -a "$LOG"
    timeout 60 "$T" --ignored --exact timing_composed_vs_fused_batch_1 --nocapture 2>&1 \
        | tee -a "$LOG" | grep -E "timing|result|panicked"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
logits)
    echo "=== whole model, one token per step (fused) vs one prefill chunk ===" | tee -a "$LOG"
    python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 200000 for i in range(24)]))' > "$OUT/ids.json"
    logits() {  # logits NAME MODEL CHUNK
        timeout 90 "$HR" --attn-execution fused logits --backend cuda --synthetic "$2" \
            --ids "$OUT/ids.json" --out "$OUT/logits-$1.safetensors" --chunk "$3" 2>&1 | tail -n 2 | head -n 1
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    }
    logits l1-step qwen3.6-35b-a3b:layers=1 1
    logits l1-prefill qwen3.6-35b-a3b:layers=1 24
    echo "--- 1 layer, per step vs one chunk (printed)"
    python3 bench/gpu/compare_decode_logits.py "$OUT/logits-l1-step.safetensors" "$OUT/logits-l1-prefill.safetensors" || status=1
    rm -f "$OUT"/logits-*.safetensors
    [ -n "${SKIP_FIXTURES:-}" ] && continue
    echo "--- fixtures, chunk 1, fused paths on, vs the CPU f32 run on bf16 weights (bar 2e-2)"
    FIX=crates/model/tests/fixtures; TMP=$(mktemp -d)
    for fx in dense_d64 moe_d64 moe_d256 next_d128; do
        python3 bench/gpu/round_bf16.py "$FIX/$fx" "$TMP/bf16w-$fx" >/dev/null 2>&1
        "$HR" logits --backend cpu --model "$TMP/bf16w-$fx" --ids "$FIX/$fx/ids_40.json" \
            --out "$TMP/cpu.safetensors" >/dev/null 2>&1 || { echo "$fx: CPU baseline failed"; status=1; continue; }
        if timeout 60 "$HR" --attn-execution fused logits --backend cuda --model "$FIX/$fx" \
            --ids "$FIX/$fx/ids_40.json" --out "$TMP/cuda.safetensors" --chunk 1 >"$TMP/log" 2>&1; then
            r=$(python3 bench/gpu/compare_logits.py --value "$TMP/cuda.safetensors" "$TMP/cpu.safetensors" 2e-2) \
                && v=PASS || { v=FAIL; status=1; }
            echo "$fx n=40 chunk=1: $r $v"
        else
            echo "$fx chunk=1: headroom failed: $(tail -n 2 "$TMP/log" | tr '\n' ' ')"; status=1
        fi
    done 2>&1 | tee -a "$LOG"
    ;;
decode)
    echo "=== decode after 8k and 32k (35B-A3B shape, engine, fused attention) ===" | tee -a "$LOG"
    HEADROOM_DECODE_STATS=1 timeout 100 "$HR" --attn-execution fused \
        bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
        --iterations 1 --warmup 0 --decode 64 --json "$OUT/decode.json" 2>&1 \
        | tee -a "$LOG" | grep -E "decode|tok/s" | grep -v "run [0-9]"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
echo "check_gdn_decode: status $status" | tee -a "$LOG"
exit $status
