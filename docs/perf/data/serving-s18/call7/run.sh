#!/usr/bin/env bash
# Session 18, call 7 (branch fp8mixed): at one row a GDN layer's FP8 in_proj (qkv, z) and the bf16
# b / a projections an FP8 checkpoint keeps, in one GEMV launch (fp8_gemv_mixed_c{1,2}_r1) instead of
# an FP8 launch and a bf16 one: 30 launches fewer a decode step on the FP8 preset (call 6's ncu:
# 30 x gemv_c1_r1 at 3.2 us beside the FP8 GEMVs). Binaries (.devbin/s18c7/bins.tar.xz): A = main
# bb087d8 (fp8cvt merged); B = fp8mixed and its fp8_ops / fp8_backend / cuda_fp8 test binaries.
# Prediction: FP8 decode after 2k +2-3.5 % (30 x 2-3 us of a 2.55 ms step); bf16 unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c7; mkdir -p $T && tar -xJf .devbin/s18c7/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B)"
timeout 90 $B/fp8_ops --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED|bits"
timeout 90 $B/fp8_backend --ignored --test-threads 1 a_mixed_set linear_many_takes 2>&1 | grep -E "test result|panicked|FAILED|bits"
timeout 90 $B/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
echo "=== bench ttft FP8 A B A B"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 100 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/fp8 $side$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
