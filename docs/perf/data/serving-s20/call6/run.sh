#!/usr/bin/env bash
# Session 20, call 6 (the session's last device seconds): E = main faa2757
# (the FP8 down on the tensor cores, call 5), F = fp8gu (E + the FP8 gate_up
# on the tensor cores: moe_decode_gate_up_fp8_mma, a CTA three 8-column
# tiles, each one m16 A of its 8 gate rows and 8 up rows so SiLU(g) * u sits
# in one lane, hidden split over the 8 warps, x as f16 B times a power of
# two a warp). Call 4's ncu: the FMA FP8 gate_up runs 292 warp
# instructions a KB at 25 % of DRAM.
# Binaries: .devbin/s20g/bins.tar.xz (E/*, F/*).
# Prediction: FP8 block at one row 20.7 -> 16-18 us; FP8 decode +5-10 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20g; mkdir -p $T && tar -xJf .devbin/s20g/bins.tar.xz -C $T
E=$T/E; F=$T/F
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (F)"
timeout 120 $F/fp8_backend --ignored --nocapture --test-threads 1 the_moe_block the_fused_fp8 2>&1 | grep -E "^test |fp8_moe: case . rows [1258]:|35B|test result|panicked" | sed "s/^/F /"
timeout 60 $F/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/F cuda_fp8 /"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $F/fp8_backend --ignored --exact fused::the_fused_fp8_decode_matches_f64_at_1_to_8_rows 2>&1 | grep -E "ERROR SUMMARY"
echo "=== fp8_moe_timing E F"
for s in E F; do
  timeout 60 $T/$s/fp8_backend --ignored --nocapture --test-threads 1 fp8_moe_timing 2>&1 | grep -E "fp8_moe_timing: rows (1|2|4|8):" | sed "s/^/$s /"
done
echo "=== bench ttft E F E F (FP8)"
for run in 1 2; do for s in E F; do
  timeout 60 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$s$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
