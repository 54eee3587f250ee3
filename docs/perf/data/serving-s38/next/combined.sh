#!/usr/bin/env bash
# Prepared in session 38: next/README's items 1 and 2 in one call, for a session that may get
# only one start (≈ 420 s; any sm_90a card, H200 preferred; carry [".devbin/main",
# ".devbin/fp8mc"]: main from caa2963 on and main + next/fp8mc.patch, each packed by
# bench/gpu/pack_bins.sh DIR headroom-cuda:fp8_grouped).
# 1. fp8mc's tests: the f64 checks, Tiles / Ws / Pairs the same bits, the skew test through Ws
#    and Pairs (a hang aborts after 10 s).
# 2. Its timing: whole routed experts, tiles / ws / pairs at 512-32,768 tokens.
# 3. FP8 32k TTFT, main then fp8mc, 6 runs each with --breakdown-each: the A/B, and each run's
#    parts for the alternation (docs/perf/serving.md sessions 37-38).
# 4. W1 FP8, fresh servers, main then fp8mc (while the call has time).
# Predictions: docs/perf/cuda-fp8.md session 38 (pairs) and next/alternation.sh.
source bench/gpu/call_prelude.sh main fp8mc
timeout 100 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|hang|abort" "$O/fp8_grouped.txt" | head -8
timeout 90 /tmp/fp8mc/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
  --nocapture > "$O/timing.txt" 2>&1
echo "timing rc $? (t=$SECONDS)"; grep fp8_grouped_timing "$O/timing.txt" | sed 's/, dequant + bf16.*fp8 tiles/ ... tiles/' | cut -c1-170
for v in main fp8mc; do
  timeout 100 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 6 --warmup 1 --breakdown-each --json "$O/ttft-$v.json" > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|tokens, run|    run [0-9]" "$O/ttft-$v.txt" | cut -c1-200
done
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
for v in main fp8mc; do
  [ $SECONDS -lt 420 ] || break
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971
done
cd "$O" && tar -czf w1.tgz w1-*.json serve-*.log 2>/dev/null; rm -f "$O"/w1-*.txt "$O"/w1-*.json "$O"/serve-*.log
