#!/usr/bin/env bash
# Session 33, call 3 (H100). Binaries: s33m = main d02bee9 (headroom,
# fp8_grouped); s33b = branch actcodes 1a841e4 (headroom, fp8_grouped,
# fp8_backend): the FP8 gate+up writes act's e4m3 codes and scales from
# clusters of two CTAs (the 64-column halves of a 128-column scale group
# trade their rows' amax through distributed shared memory); the grid and
# the K loop of main, the down kernel's code byte for byte main's.
# Call 2's two-loop CTA (s33a) was slower: fp8_grouped_timing 0.337 -> 0.369
# ms at 512 tokens, 1.061 -> 1.069 at 8,192; W1 FP8 5,255 -> 5,159.
# 1. s33b: fp8_grouped (f64), fp8_backend (MoE block), greedy ids of the
#    FP8 35B equal to session 32's (the same bits predicted).
# 2. fp8_grouped timing, s33m then s33b. Prediction: native FP8 -2..-4 % at
#    8,192 tokens (the act quantization launch, ~30 us on this card, and half
#    the act bytes written), about equal at 512.
# 3. W1 FP8: s33m, s33b, s33m, s33b (fresh servers; the pair twice for the
#    noise). Prediction: +0.5-1.5 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s33m s33b; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
t() { echo "  (t=$SECONDS)"; }
timeout 100 /tmp/s33b/h/fp8_grouped --ignored --test-threads 1 --skip timing > "$O/fp8_grouped-s33b.txt" 2>&1
echo "s33b fp8_grouped rc $?"; grep -E "test result|panicked|worst" "$O/fp8_grouped-s33b.txt" | head -14; t
timeout 100 /tmp/s33b/h/fp8_backend --ignored --test-threads 1 --skip timing > "$O/fp8_backend-s33b.txt" 2>&1
echo "s33b fp8_backend rc $?"; grep -E "test result|panicked" "$O/fp8_backend-s33b.txt" | head -5; t
timeout 100 /tmp/s33b/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-s33b.jsonl" > /dev/null 2>&1
echo "fingerprint s33b rc $?"
python3 - "$O/fp-s33b.jsonl" docs/perf/data/serving-s32/call4/fp-s32d.jsonl <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
try: a = ids(sys.argv[1])
except Exception as e: a = repr(e)
print("fingerprint s33b equal to session 32's:", a == ids(sys.argv[2]))
PY
t
for v in s33m s33b; do
  timeout 60 /tmp/$v/h/fp8_grouped --ignored --exact timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms --nocapture \
    > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $?"; grep fp8_grouped_timing "$O/timing-$v.txt" | cut -c1-70
done; t
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
for r in 1 2; do for v in s33m s33b; do
  w1 fp8-$v-$r /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971; echo "  $(cap "$O/serve-fp8-$v-$r.log")"
done; done
rm -f "$O"/w1-*.txt "$O"/serve-*-2.log
