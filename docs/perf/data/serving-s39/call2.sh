#!/usr/bin/env bash
# Session 39, call 2: call 1 cut to a short budget (≈ 200-240 s, any sm_90a card; carry
# [".devbin/main", ".devbin/fp8mc", ".devbin/pairs"], built as call1.sh says).
# 1. pairs: paged_attention's pairs tests (bits equal to the heads kernel's, f64, NaN, the
#    default choice).
# 2. FP8 32k TTFT, main / pairs / fp8mc, 4 measured runs each with --breakdown-each.
# 3. fp8mc's fp8_grouped tests while time is left.
source bench/gpu/call_prelude.sh main fp8mc pairs
timeout 60 /tmp/pairs/h/paged_attention --ignored --test-threads 1 pairs:: > "$O/paged_attention.txt" 2>&1
echo "paged_attention pairs:: rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|FAILED|failed" "$O/paged_attention.txt" | head -8
for v in main pairs fp8mc; do
  # The first arm compiles the kernels (in parallel) on a fresh machine.
  lim=55; [ $v = main ] && lim=90; [ $v = fp8mc ] && [ $SECONDS -ge 190 ] && break
  timeout $lim /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 4 --warmup 1 --breakdown-each --json "$O/ttft-$v.json" > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|tokens, run|    run [0-9]" "$O/ttft-$v.txt" | cut -c1-200
done
[ $SECONDS -lt 200 ] && timeout 35 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 --skip timing > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|hang|abort" "$O/fp8_grouped.txt" | head -8
