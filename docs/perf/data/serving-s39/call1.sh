#!/usr/bin/env bash
# Session 39, call 1 (any sm_90a card, ≈ 250-380 s: later steps only while time is left; carry [".devbin/main", ".devbin/fp8mc",
# ".devbin/pairs"]): main 10691a4; fp8mc = main + serving-s38/next/fp8mc.patch; pairs = branch
# pairs (the paged attention's long-prompt launches on attn_paged_pairs_d256: two query heads of
# a KV group a CTA sharing the key tiles a producer warpgroup streams). Each packed by
# bench/gpu/pack_bins.sh DIR headroom-cuda:fp8_grouped (main, fp8mc) or
# headroom-cuda:paged_attention (pairs).
# 1. pairs: paged_attention's GPU tests (the pairs' bits equal to the heads kernel's, f64,
#    NaN, the default choice; and every older test, which now runs pairs where it fits).
# 2. FP8 32k TTFT, main / fp8mc / pairs, 6 runs each with --breakdown-each (each run's parts).
# 3. fp8mc: fp8_grouped's tests (f64, Tiles / Ws / Pairs the same bits, skew) and its timing.
# 4. W1 FP8, fresh servers, main then fp8mc, while the call has time.
# Predictions: docs/perf/cuda-fp8.md session 38 (fp8mc: routed experts −6–12 % at 8k,
# TTFT −10–20 ms, W1 +2–4 %); docs/perf/cuda-attention.md session 39 (pairs: attention −5 to
# −15 % at 32k, FP8 32k TTFT −9 to −26 ms).
source bench/gpu/call_prelude.sh main fp8mc pairs
timeout 100 /tmp/pairs/h/paged_attention --ignored --test-threads 1 > "$O/paged_attention.txt" 2>&1
echo "paged_attention (pairs) rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|FAILED|failed" "$O/paged_attention.txt" | head -8
for v in main pairs fp8mc; do
  timeout 70 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 6 --warmup 1 --breakdown-each --json "$O/ttft-$v.json" > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|tokens, run|    run [0-9]" "$O/ttft-$v.txt" | cut -c1-200
done
[ $SECONDS -lt 250 ] && timeout 60 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|hang|abort" "$O/fp8_grouped.txt" | head -8
[ $SECONDS -lt 290 ] && timeout 45 /tmp/fp8mc/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
  --nocapture > "$O/timing.txt" 2>&1
echo "timing rc $? (t=$SECONDS)"; grep fp8_grouped_timing "$O/timing.txt" | sed 's/, dequant + bf16.*fp8 tiles/ ... tiles/' | cut -c1-170
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
for v in main fp8mc; do
  [ $SECONDS -lt 250 ] || break
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971
done
cd "$O" && tar -czf w1.tgz w1-*.json serve-*.log 2>/dev/null; rm -f "$O"/w1-*.txt "$O"/w1-*.json "$O"/serve-*.log
