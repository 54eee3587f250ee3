#!/usr/bin/env bash
# Prepared in session 36 for the next session lent an H200 (kind nvidia-h200,
# needs_h200: W1 bf16 at c = 512 does not fit an H100; ≈ 420 s).
#   A = .devbin/s35main (main d5f164c: session 36's H200 bars were measured on it),
#   B = .devbin/next    (main f517750: the FP8 ws GEMMs on 128 x 256 units).
# Build here: bash bench/gpu/pack_bins.sh .devbin/next headroom-cuda:fp8_grouped
# on main; .devbin/s35main is session 35's .devbin/next (the build machine keeps
# .devbin). carry [".devbin/s35main", ".devbin/next"].
# 1. W1 FP8 (1,000 x 1,024 / 128, c = 512, default flags), fresh servers,
#    A B A B. Prediction (H100: +2.1 / +2.3 %; session 36 call 1: A 6,566.9):
#    B +2-3 %, ≈ 6,700-6,760 output tok/s.
# 2. W1 bf16 on B (unchanged code: session 36 call 1 gave 5,683.6).
# 3. bench ttft --lengths 2048,32768 --decode 64 on B, FP8 then bf16: the FP8
#    32k TTFT (bar 0.45 s; A 513.9 ms; prediction −2-4 %: the 32k prompt's
#    routed experts run the ws GEMMs), decode unchanged (the decode MoE
#    kernels are other ones).
source bench/gpu/call_prelude.sh s35main next
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
for v in s35main next s35main next; do w1 fp8-$v /tmp/$v/h/headroom $F 8971; done
w1 bf16-next /tmp/next/h/headroom $M 8971
for m in $F $M; do
  [ $SECONDS -lt 480 ] || break
  timeout 100 /tmp/next/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
rm -f "$O"/w1-*.txt "$O"/serve-*.log
