#!/usr/bin/env bash
# Session 36, call 4 (any sm_90a card): branch fp8wide — the FP8 ws grouped
# GEMMs on 128 x 256 units (two 128-row halves of B a stage through one
# partial-sum buffer) against main's 128 x 128 ones.
# Build here: bash bench/gpu/pack_bins.sh .devbin/wide headroom-cuda:fp8_grouped
# (on fp8wide); .devbin/next is main's build. carry [".devbin/wide", ".devbin/next"].
# 1. fp8_grouped: f64 checks, every case on both families with the same bits
#    (hidden 384: the down GEMM falls back to the tiles), the skew test.
# 2. fp8_grouped timing, main then wide (35B shape; 512 / 2,048 / 8,192 tokens).
# 3. The FP8 35B's greedy ids against session 32's.
# 4. W1 FP8, fresh servers, next wide next wide.
# Prediction (call 2: gate+up 443, down 280 us a layer at W1's mixed step;
# L2-bound at 128 FLOP a byte): gate+up -15-25 %, down -10-20 %, the mixed
# step -4-7 %, W1 FP8 +3-5 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in wide next; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 200 /tmp/wide/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "fp8 ws under skew|test result|panicked|differ|hang" "$O/fp8_grouped.txt" | head -14
for v in next wide; do
  timeout 90 /tmp/$v/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
    --nocapture > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $?"; grep fp8_grouped_timing "$O/timing-$v.txt" | cut -c1-150
done
timeout 120 /tmp/wide/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-wide.jsonl" > "$O/gen.log" 2>&1
echo "generate rc $? (t=$SECONDS)"
python3 - "$O/fp-wide.jsonl" docs/perf/data/serving-s32/call4/fp-s32d.jsonl <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
try: a = ids(sys.argv[1])
except Exception as e: a = repr(e)
print("fingerprint equal to session 32's:", a == ids(sys.argv[2]))
PY
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
for v in next wide next wide; do
  [ $SECONDS -lt 470 ] || break
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971
done
rm -f "$O"/w1-*.txt "$O"/serve-*.log
