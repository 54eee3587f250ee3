#!/usr/bin/env bash
# Session 18, call 5 (branch fp8cvt): e4m3 -> f32 by the conversion instruction on sm_89+
# (cvt.rn.f16x2.e4m3x2: two weights an instruction, then each half to f32) instead of three
# integer ops a weight; the sums are the weights' own (E4M3_UNSCALE = 1). Binaries
# (.devbin/s18c5/bins.tar.xz): A = main (headroom, fp8_ops, fp8_backend test binaries); B = fp8cvt
# (the same + decode_moe, cuda_fp8). Static code: the one-row FP8 GEMV 2,488 -> 2,216
# instructions, moe_decode_gate_up_fp8 5,824 -> 5,544, down_fp8 1,704 -> 1,552.
# Prediction: FP8 GEMV at one row -8-12 % (n 12288 k 2048: 10.0 -> ~9 us), FP8 MoE decode block
# -3-5 %, FP8 decode after 2k +3-5 %; bf16 unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c5; mkdir -p $T && tar -xJf .devbin/s18c5/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B)"
timeout 150 $B/fp8_ops --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 150 $B/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 200 $B/cuda_fp8 --ignored --nocapture --test-threads 1 2>&1 | grep -E "logits|rel|frob|test result|panicked" | head -12
echo "=== kernel timing A B A B"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 100 $d/fp8_ops --ignored --nocapture --exact timing::timing_fp8_gemv_vs_bf16_gemv_at_one_row 2>&1 | grep -E "fp8_timing" | sed -E "s/^/$side$run /" | head -12
  timeout 100 $d/fp8_backend --ignored --nocapture --exact fp8_moe_timing 2>&1 | grep -E "fp8_moe_timing" | sed -E "s/^/$side$run /" | head -8
done; done
echo "=== bench ttft FP8 A B A B (and bf16 once each)"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/fp8 $side$run /"
done; done
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/bf16 $side /"
done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
