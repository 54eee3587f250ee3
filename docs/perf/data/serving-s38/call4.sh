#!/usr/bin/env bash
# Session 38, call 4: call 3 without W1 (the session's device budget had fallen to ≈ 300 s
# after refused starts): branch fp8mc's tests, its timing of tiles / ws / pairs at
# 512-32,768 tokens, and the FP8 32k TTFT, main then the branch (carry [".devbin/main",
# ".devbin/fp8mc"]; ≈ 200 s). Prediction as call 3's (docs/perf/cuda-fp8.md, session 38).
source bench/gpu/call_prelude.sh main fp8mc
timeout 100 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|hang|abort" "$O/fp8_grouped.txt" | head -8
timeout 90 /tmp/fp8mc/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
  --nocapture > "$O/timing.txt" 2>&1
echo "timing rc $? (t=$SECONDS)"; grep fp8_grouped_timing "$O/timing.txt" | sed 's/, dequant + bf16.*fp8 tiles/ ... tiles/' | cut -c1-170
for v in fp8mc main; do
  [ $SECONDS -lt 200 ] || break
  timeout 60 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 3 --warmup 1 > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|run [0-9]" "$O/ttft-$v.txt" | cut -c1-100
done
