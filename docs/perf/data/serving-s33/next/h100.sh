#!/usr/bin/env bash
# Prepared in session 33 for a next session lent only an H100 (as sessions
# 27-33 were): the card's baselines on main, one call of ≈ 250 s.
#   bash bench/gpu/pack_bins.sh .devbin/next headroom-cuda:fp8_grouped;
#   carry [".devbin/next"].
# 1. fp8_grouped timing (35B shape, whole routed experts at 512 / 2,048 /
#    8,192 tokens): the reference for the FP8 warp-specialised grouped GEMM
#    docs/perf/cuda-fp8.md (session 33, call 6) plans (session 33 main:
#    0.338 / 0.427 / 1.029 ms).
# 2. bench ttft 2k/32k --decode 64, bf16 and FP8: batch-1 decode on this card
#    (the FP8 / bf16 decode ratio, issue 26's x1.4 bar, is the H200's).
# 3. W1 FP8 on a fresh server (session 33 main: 5,255.3 output tok/s).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next; mkdir -p $T && tar -xJf .devbin/next/bins.tar.xz -C $T
B=$T/h/headroom
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 60 $T/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms --nocapture \
  > "$O/timing.txt" 2>&1
echo "timing rc $?"; grep fp8_grouped_timing "$O/timing.txt" | cut -c1-70
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  timeout 150 $B bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
w1 fp8-next $B qwen3.6-35b-a3b-fp8 8971
