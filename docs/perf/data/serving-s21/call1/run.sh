#!/usr/bin/env bash
# Session 21, call 1: the bf16 MoE decode experts on the tensor cores
# (moe_decode_gate_up_mma: a CTA three m16 tiles of 8 gate + 8 up rows, bf16
# weights as A and x as B as they are; moe_decode_down_mma: a CTA 8 output
# columns, a slot's tile one m16 A of its rows' two halves, the f32
# activations as hi + lo bf16 in four B columns). Never run before.
# Binaries (.devbin/s21a/bins.tar.xz): main = ad6104c (headroom, decode_moe);
# new = the session's tree (headroom, decode_moe, cuda_engine), all --release.
# Prediction: bf16 block at one row ~27 -> 21-23 us (gate_up issue-bound at
# 150 warp instructions a KB -> ~10); bf16 decode after 2k / 32k +5-9 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21a; mkdir -p $T && tar -xJf .devbin/s21a/bins.tar.xz -C $T
A=$T/main; B=$T/new
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
{
echo "=== decode_moe (new)"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "^test |test result|panicked|rel err"
echo "t=$SECONDS"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/decode_moe --ignored --exact tensor_core_shapes_with_tails_match_f64 2>&1 | grep -E "ERROR SUMMARY|test result"
echo "t=$SECONDS"
echo "=== moe_decode_timing main new"
for s in main new; do
  timeout 60 $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "moe_decode_timing: rows|panicked" | sed "s/^/$s /"
done
echo "t=$SECONDS"
echo "=== bench ttft main new main new (bf16)"
for run in 1 2; do for s in main new; do
  timeout 100 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-$s$run.json" 2>&1 | grep -E "TTFT" | sed -E "s/^/$s$run /"
  echo "t=$SECONDS"
done; done
echo "=== cuda_engine 255 others (new)"
left=$((560 - SECONDS))
[ $left -gt 30 ] && timeout $left $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked"
echo "t=$SECONDS"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
