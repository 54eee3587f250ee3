#!/usr/bin/env bash
# Session 40 call 1 (prepared in session 39 as next/call.sh) (any sm_90a card, ≈ 400 s; carry [".devbin/main", ".devbin/fp8mc",
# ".devbin/pairs2"]: main and main + next/fp8mc.patch, each packed by bench/gpu/pack_bins.sh DIR
# headroom-cuda:fp8_grouped; main + next/pairs2.patch packed with headroom-cuda:paged_attention;
# each branch in its own CARGO_TARGET_DIR — next/README says how).
# 1. fp8mc's skew test alone (Ws and Pairs under skewed routings; a 10 s watchdog aborts a
#    hang and says which), with its output.
# 2. fp8_grouped's other tests (f64, Tiles / Ws / Pairs the same bits) and the timing.
# 3. FP8 32k TTFT, main then fp8mc, 4 measured runs each with --breakdown-each.
# 4. pairs2 (the pairs attention kernel with FA3's intra-warpgroup overlap): its tests (the heads
#    kernel's bits), then its 32k TTFT arm beside main's.
# 5. W1 FP8, fresh servers, main then fp8mc, while the call has time.
# Prediction: docs/perf/cuda-fp8.md session 38 (routed experts −6–12 % at 8k, −8–15 % at 32k;
# TTFT −10–20 ms; W1 +2–4 %).
source bench/gpu/call_prelude.sh main fp8mc pairs2
timeout 60 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 skew:: --nocapture > "$O/skew.txt" 2>&1
echo "skew rc $? (t=$SECONDS)"; grep -E "test result|panicked|hang|abort|fp8 ws under skew" "$O/skew.txt" | head -8
timeout 100 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 --skip timing --skip skew:: --nocapture \
  > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|rel err" "$O/fp8_grouped.txt" | head -8
timeout 60 /tmp/fp8mc/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
  --nocapture > "$O/timing.txt" 2>&1
echo "timing rc $? (t=$SECONDS)"; grep fp8_grouped_timing "$O/timing.txt" | cut -c1-170
for v in main fp8mc; do
  timeout 90 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 4 --warmup 1 --breakdown-each --json "$O/ttft-$v.json" > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|    run [0-9]" "$O/ttft-$v.txt" | cut -c1-200
done
timeout 60 /tmp/pairs2/h/paged_attention --ignored --test-threads 1 pairs:: > "$O/pairs2.txt" 2>&1
echo "pairs2 tests rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ" "$O/pairs2.txt" | head -6
timeout 70 /tmp/pairs2/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
  --iterations 4 --warmup 1 --breakdown-each --json "$O/ttft-pairs2.json" > "$O/ttft-pairs2.txt" 2>&1
echo "ttft pairs2 rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|    run [0-9]" "$O/ttft-pairs2.txt" | cut -c1-200
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
[ $SECONDS -lt 200 ] && for v in main fp8mc; do
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971
done
cd "$O" && tar -czf w1.tgz w1-*.json serve-*.log 2>/dev/null; rm -f "$O"/w1-*.txt "$O"/w1-*.json "$O"/serve-*.log
