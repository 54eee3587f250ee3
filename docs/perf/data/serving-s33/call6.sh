#!/usr/bin/env bash
# Session 33, call 6. Binaries: s33m = main d02bee9 (headroom, fp8_grouped);
# s33c = branch down2 51bee63: the FP8 down grouped GEMM's CTAs take
# DOWN_TILES = 2 column tiles of 128 y columns in one pipeline (the next
# tile's first k-blocks load while a tile is stored; half the CTAs, each
# twice the K loop); s33d = the same with DOWN_TILES = 4 (not committed: the
# constant in moe_grouped_gemm_fp8.cu and FP8_DOWN_TILES in fp8.rs).
# Why: call 4's ncu of the FP8 W1 mixed step (H100) has moe_gemm_down_fp8 at
# 366 us a layer = 388 TFLOP/s against gate+up's 597: K = 512 is 4 k-blocks
# a CTA, so a CTA's pipeline fill and epilogue are a large part of it.
# 1. fp8_grouped f64 checks on s33c and s33d (hidden 256: one CTA of two
#    tiles; hidden 384: a CTA of two and one of one (s33c), one of three
#    (s33d)); greedy ids of the FP8 35B equal to session 32's (same bits).
# 2. fp8_grouped timing m, c, d. Prediction: native FP8 at 8,192 tokens
#    -3..-6 % (c), -4..-8 % (d); about equal at 512.
# 3. W1 FP8 m, c, d on fresh servers. Prediction: +1-2 % (c), +1.5-3 % (d).
# On an H200 also: W1 bf16 on s33m and bench ttft 2k/32k --decode 64 (bars).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s33m s33c s33d; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$GPU"
SECONDS=0
t() { echo "  (t=$SECONDS)"; }
for v in s33c s33d; do
  timeout 100 /tmp/$v/h/fp8_grouped --ignored --test-threads 1 --skip timing > "$O/fp8_grouped-$v.txt" 2>&1
  echo "$v fp8_grouped rc $?"; grep -E "test result|panicked" "$O/fp8_grouped-$v.txt" | head -4
  timeout 100 /tmp/$v/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
    --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-$v.jsonl" > /dev/null 2>&1
  python3 - "$O/fp-$v.jsonl" docs/perf/data/serving-s32/call4/fp-s32d.jsonl "$v" <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
try: a = ids(sys.argv[1])
except Exception as e: a = repr(e)
print(f"fingerprint {sys.argv[3]} equal to session 32's:", a == ids(sys.argv[2]))
PY
  t
done
for v in s33m s33c s33d; do
  timeout 60 /tmp/$v/h/fp8_grouped --ignored --exact timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms --nocapture \
    > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $?"; grep fp8_grouped_timing "$O/timing-$v.txt" | cut -c1-70
done; t
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
for v in s33m s33c s33d; do
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971; echo "  $(cap "$O/serve-fp8-$v.log")"
done
case "$GPU" in *H200*)
  w1 bf16-s33m /tmp/s33m/h/headroom qwen3.6-35b-a3b 8971; echo "  $(cap "$O/serve-bf16-s33m.log")"
  for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
    timeout 150 /tmp/s33m/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
      --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
    echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
  done;;
esac
rm -f "$O"/w1-*.txt
