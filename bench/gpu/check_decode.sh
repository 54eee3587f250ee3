#!/usr/bin/env bash
# On the GPU machine, in one call (issue 9, decode), by section:
#  attention  the split-KV / packed-GQA attention tests (tests/attention_split.rs),
#             tests/gpu.rs, the backend attention-over-cache test, memcheck on the
#             small split case, and attention TFLOP/s for 512 rows after 32,256 and
#             2,048 after 30,720 (the split schedule the shape picks);
#  moe        the MoE decode path's tests (tests/decode_moe.rs: f64 reference, the
#             grouped-GEMM path, NaN-poisoned outputs, tails, expert slices, the
#             model fixtures' blocks, shapes past one pass of each loop) and
#             compute-sanitizer memcheck on its small cases;
#  logits     the whole model's logits for a 24-token prompt fed one token per
#             step (every call a decode: the GEMV, the fused GDN core and attention
#             prep, the MoE decode kernels) against the same prompt in one chunk
#             (the prefill paths), compared (bench/gpu/compare_decode_logits.py),
#             one layer and forty, printed (each decode kernel is asserted against
#             an f64 reference by its own tests);
#  decode     decode tokens/s after 8k and 32k prompts on the 40-layer 35B-A3B
#             shape through the engine, binaries side by side in the same call,
#             twice (DECODE_BINS, default "new:BIN_DIR/headroom"; e.g.
#             "old:OLD/headroom new:BIN_DIR/headroom"), with HEADROOM_DECODE_STATS=1
#             (host queue time vs wait for the GPU per step), then the per-part
#             breakdown of profiled decode steps.
# Binaries (built elsewhere) in $BIN_DIR: headroom and the test binaries a section
# needs (attention_split-*, gpu-*, backend_ops-*, decode_moe-*).
# Usage: bench/gpu/check_decode.sh BIN_DIR [SECTION...]   (default: moe logits decode)
# Results go to $OUT (or ./gpu-out): tests.log, decode.log and the JSON of each arm.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_decode.sh BIN_DIR [attention|moe|logits|decode]...}
shift
SECTIONS=${*:-moe logits decode}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
status=0
HR="$BIN_DIR/headroom"
pick() { ls "$BIN_DIR"/$1-* 2>/dev/null | grep -v '\.d$' | head -n1; }
memcheck() {  # memcheck BINARY TEST
    if command -v compute-sanitizer >/dev/null; then
        timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 \
            "$1" --ignored --exact "$2" 2>&1 | tail -n 6
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED: $2"; status=1; }
    else
        echo "compute-sanitizer not found"; status=1
    fi
}

for section in $SECTIONS; do
case $section in
attention)
    SPLIT=$(pick attention_split); GPU=$(pick gpu); OPS=$(pick backend_ops)
    echo "=== tests: attention_split, gpu.rs, backend attention over the cache ==="
    timeout 60 "$SPLIT" --ignored --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | tail -n 5
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    timeout 40 "$GPU" --ignored --test-threads=1 2>&1 | tee -a "$OUT/tests.log" | tail -n 5
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    timeout 40 "$OPS" --ignored --test-threads=1 attention 2>&1 | tee -a "$OUT/tests.log" | tail -n 5
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "=== memcheck: small split case ==="
    memcheck "$SPLIT" small_split_case_for_memcheck
    echo "=== attention TFLOP/s (fused, 16/2, d256, bf16) ==="
    for lh in "512 32256" "2048 30720"; do
        set -- $lh
        echo "--- q_len=$1 history=$2"
        timeout 30 "$HR" bench attention --backend cuda --lengths "$1" --history "$2" --routes fused \
            --iterations 10 --warmup 2 2>&1 | tail -n 4
    done
    ;;
moe)
    MOE=$(pick decode_moe)
    echo "=== tests: decode_moe ==="
    timeout 120 "$MOE" --ignored --test-threads=1 --nocapture 2>&1 | tee -a "$OUT/tests.log" | tail -n 14
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    echo "=== memcheck: decode_moe small cases ==="
    memcheck "$MOE" shapes::small_shapes_with_tails_and_expert_parallel_slices_match_f64
    memcheck "$MOE" shapes::model_fixture_shapes_match_f64
    memcheck "$MOE" shapes::nan_row_stays_in_its_row_and_repeated_calls_agree
    ;;
logits)
    # The two paths round in different places (the chunked GDN's tf32 prep
    # against the recurrent step, the grouped MoE GEMMs against the decode
    # kernels, cuBLAS against the GEMV), and over forty layers routing flips
    # near ties compound (docs/perf/bf16-parity.md): the distance is printed.
    echo "=== whole model: logits one token per step (decode paths) vs one chunk (prefill paths) ==="
    python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 200000 for i in range(24)]))' > "$OUT/ids.json"
    logits() {  # logits NAME MODEL CHUNK
        timeout 90 "$HR" --attn-execution fused logits --backend cuda --synthetic "$2" \
            --ids "$OUT/ids.json" --out "$OUT/logits-$1.safetensors" --chunk "$3" 2>&1 | tail -n 2 | head -n 1
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    }
    cmp_logits() { python3 "$(dirname "$0")/compare_decode_logits.py" "$OUT/logits-$1.safetensors" "$OUT/logits-$2.safetensors" ${3:-} || status=1; }
    logits l1-prefill qwen3.6-35b-a3b:layers=1 24
    logits l1-decode qwen3.6-35b-a3b:layers=1 1
    echo "--- 1 layer, prefill vs decode paths"; cmp_logits l1-prefill l1-decode
    logits prefill qwen3.6-35b-a3b 24
    logits decode qwen3.6-35b-a3b 1
    echo "--- 40 layers, prefill vs decode paths"; cmp_logits prefill decode
    rm -f "$OUT"/logits-*.safetensors "$OUT/ids.json"
    ;;
decode)
    # Arms: a name and its headroom binary (old and new side by side).
    BINS=${DECODE_BINS:-"new:$HR"}
    echo "=== decode after 8k and 32k (35B-A3B shape, engine, fused attention) ==="
    for pass in 1 2; do
        for a in $BINS; do
            name=${a%%:*}; bin=${a#*:}
            echo "--- pass $pass arm $name ($bin)"
            HEADROOM_DECODE_STATS=1 timeout 120 "$bin" --attn-execution fused \
                bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
                --iterations 1 --warmup 0 --decode 64 --json "$OUT/decode-$name-$pass.json" 2>&1 \
                | tee -a "$OUT/decode.log" | grep -E "decode|tok/s" | grep -v "run [0-9]"
            [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
        done
    done
    for a in $BINS; do
        name=${a%%:*}; bin=${a#*:}
        echo "--- breakdown, arm $name"
        timeout 90 "$bin" --attn-execution fused \
            bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 32768 \
            --iterations 1 --warmup 0 --decode 16 --breakdown --json "$OUT/breakdown-$name.json" 2>&1 \
            | tee -a "$OUT/decode.log" | grep -E "decode" | grep -v "run [0-9]"
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    ;;
*) echo "unknown section $section"; status=1 ;;
esac
done
echo "check_decode: status $status"
exit $status
