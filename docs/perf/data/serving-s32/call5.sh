#!/usr/bin/env bash
# Session 32, call 5: what the budget left allows on an H200 (the bars'
# card): W1 bf16 (1,000 x 1,024 / 128, c = 512, default flags, fresh
# servers) A = s31start (main 378b2bc) and B = s32d (main ef06e4a's code:
# sessions 31-32), then W1 FP8 on B alone. Prediction: bf16 +0.5-1.5 %
# (session 26: 5,599.2), FP8 on B 6,400-6,600 (session 26: 6,039.4;
# the H100's +7 % of sessions 31-32).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s31start s32d; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200: nothing run"; exit 0; }
SECONDS=0
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
for v in s31start s32d; do w1 bf16-$v /tmp/$v/h/headroom qwen3.6-35b-a3b 8971; echo "  $(cap "$O/serve-bf16-$v.log")"; done
w1 fp8-s32d /tmp/s32d/h/headroom qwen3.6-35b-a3b-fp8 8972; echo "  $(cap "$O/serve-fp8-s32d.log")"
