#!/usr/bin/env bash
# Session 32, call 4: the bars' card (an H200; the H100 arm only checks
# the binaries run). A = .devbin/s31start (main 378b2bc, before session
# 31), B = .devbin/s32c (main 129599d's code: sessions 31 and 32).
# 1. W1 (1,000 x 1,024 / 128, c = 512, default flags), fresh servers:
#    FP8 A, B; bf16 A, B. Prediction (from the H100): FP8 +7-9 %
#    (session 31 +4.5 %, session 32 +2.1 %), bf16 +0.5-1.5 % (the GDN prep,
#    the normed rows freed early); session 26 on the H200: bf16 5,599.2,
#    FP8 6,039.4.
# 2. `bench ttft --lengths 2048,32768 --iterations 3 --decode 64`, B, bf16
#    and FP8: batch-1 decode (bars 500 / 450 tok/s, FP8 1.4x bf16), TTFT
#    (FP8 32k bar 0.45 s).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s31start s32c; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
for a in "fp8 $F" "bf16 $M"; do set -- $a
  for v in s31start s32c; do w1 $1-$v /tmp/$v/h/headroom $2 8971; echo "  $(cap "$O/serve-$1-$v.log")"; done
done
for m in $M $F; do
  timeout 150 /tmp/s32c/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
