#!/usr/bin/env bash
# Session 31, call 5 (the H200 the bars are set on; its first since session
# 26). Binaries: b = .devbin/s31b (c439e76: the prep change, before the FP8
# padding), m = .devbin/s31m (main 8e0ee97: + the padded FP8 GEMM),
# s = .devbin/s31s (branch fp8set f472691: + one quantization a set).
# 1. fp8set's GEMM tests (f64; the set bit for bit against single calls);
# 2. W1 (1,000 x 1,024 / 128, c = 512, default flags) on the FP8 preset,
#    fresh servers m, s; then on bf16 with m;
# 3. `bench ttft --lengths 2048 --decode 64` bf16 (m) and FP8 (s).
# On an H100 (no H200 lent): 1, then W1 FP8 m, s only (the bars are the
# H200's; call 4 measured b against m there). Cut to fit the budget left
# after two refused H200 starts (b stays packed for the next session).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in m s; do mkdir -p /tmp/s31$v && tar -xJf .devbin/s31$v/bins.tar.xz -C /tmp/s31$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 100 /tmp/s31s/h/fp8_ops --ignored --test-threads 1 gemm:: > "$O/fp8_ops.txt" 2>&1
echo "fp8_ops gemm rc $? (t=$SECONDS)"; grep -E "^test |test result" "$O/fp8_ops.txt" | tail -6
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  w1 fp8-m1 /tmp/s31m/h/headroom $F 8961
  w1 fp8-s1 /tmp/s31s/h/headroom $F 8962
  exit 0
fi
w1 fp8-m /tmp/s31m/h/headroom $F 8952
w1 fp8-s /tmp/s31s/h/headroom $F 8953
w1 bf16-m /tmp/s31m/h/headroom $M 8954
for a in "m $M" "s $F"; do set -- $a
  timeout 150 /tmp/s31$1/h/headroom bench ttft --backend cuda --synthetic $2 --lengths 2048 \
    --iterations 1 --warmup 1 --decode 64 > "$O/ttft-$2.txt" 2>&1
  echo "--- $2 (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/ttft-$2.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-260
done
