#!/usr/bin/env bash
# Session 21, call 7: the tensor-core gate_up from two rows at 40 columns a
# CTA (branch gumrows: moe_decode_gate_up_mma_rows for bf16, where main runs
# the FMA _rows entry from two rows; moe_decode_gate_up_fp8_mma_rows for FP8,
# where main runs the 24-column tensor-core entry at every row count).
# Binaries (.devbin/s21g/bins.tar.xz): m = main 14b4bed (decode_moe,
# fp8_backend, headroom; the kernels of main 25967e3); g = gumrows.
# Prediction: bf16 block at 2 rows 39.4 -> 36-38 us, FP8 at 2 rows 35.4 ->
# 33-34; 4 and 8 rows -0-3 %; one row unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21g; mkdir -p $T && tar -xJf .devbin/s21g/bins.tar.xz -C $T
A=$T/m; B=$T/g
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
{
echo "=== tests (g)"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 120 $B/fp8_backend --ignored --nocapture --test-threads 1 the_moe_block the_fused_fp8 2>&1 | grep -E "fp8_moe: case . rows [1258]:|35B|test result|panicked" | cut -c1-60 | head -20
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/decode_moe --ignored --exact tensor_core_shapes_with_tails_match_f64 2>&1 | grep -E "ERROR SUMMARY"
echo "t=$SECONDS"
echo "=== block timing m g m g"
for run in 1 2; do for s in m g; do
  timeout 60 $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "chained block|panicked" | sed "s/^/$s$run /"
  timeout 60 $T/$s/fp8_backend --ignored --nocapture --test-threads 1 fp8_moe_timing 2>&1 | grep -E "fp8_moe_timing: rows (1|2|4|8):|panicked" | sed -E "s/, fp8 9-launch.*//; s/^/$s$run /"
done; done
echo "t=$SECONDS"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
