#!/usr/bin/env bash
# Prepared in session 31 for the next session with an H200 (sessions 27-31
# got only H100s; session 31's three needs_h200 starts were refused). One
# call under 600 s: the bars on main, and session 31's two kernel changes
# against the session's start, on the card the bars are set on.
#   A = .devbin/s31start (main 378b2bc: before session 31),
#   B = .devbin/next     (main at the next session's start).
# 1. W1 (1,000 x 1,024 / 128, c = 512, default flags), fresh servers:
#    FP8 A, B; bf16 A, B. Prediction: FP8 +3-5 % (the padded FP8 GEMM and
#    one quantization a set: +4.5 % on the H100), bf16 +0.3-1 % (the GDN
#    prep: -0.5 ms a mixed step); session 26: bf16 5,599.2, FP8 6,039.4.
# 2. `bench ttft --lengths 2048,32768 --iterations 3 --decode 64`, B, bf16
#    and FP8: batch-1 decode (bars 500 / 450 tok/s, FP8 1.4x bf16) and
#    TTFT (FP8 32k bar 0.45 s).
# Build here:
#   git worktree add /tmp/s31start 378b2bc && (cd /tmp/s31start &&
#     bash bench/gpu/pack_bins.sh /work/main/.devbin/s31start)
#   bash bench/gpu/pack_bins.sh .devbin/next
# carry [".devbin/s31start", ".devbin/next"].
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s31start next; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
w1 fp8-a /tmp/s31start/h/headroom $F 8971
w1 fp8-b /tmp/next/h/headroom $F 8972
w1 bf16-a /tmp/s31start/h/headroom $M 8973
w1 bf16-b /tmp/next/h/headroom $M 8974
for m in $M $F; do
  timeout 150 /tmp/next/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
