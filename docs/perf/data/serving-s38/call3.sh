#!/usr/bin/env bash
# Session 38, call 3 (any sm_90a card, H200 preferred; ≈ 420 s; carry [".devbin/main",
# ".devbin/fp8mc"]): branch fp8mc — the FP8 ws grouped GEMMs in 2-CTA clusters sharing B
# (Fp8Gemms::Pairs, TMA multicast; docs/perf/cuda-fp8.md session 38). Pack:
# bench/gpu/pack_bins.sh .devbin/fp8mc headroom-cuda:fp8_grouped (on fp8mc);
# .devbin/main: main 9c33e9e+ (the fp8tiles merge) likewise.
# 1. fp8_grouped on the branch: the f64 checks, Tiles / Ws / Pairs the same bits in every
#    case, the skew test's routings through Ws and Pairs (a hang aborts after 10 s).
# 2. The timing test on the branch: whole routed experts, tiles / ws / pairs, 512-32,768 tokens.
# 3. bench ttft 32k FP8, main then the branch (3 runs each).
# 4. W1 FP8, fresh servers, main then the branch.
# Prediction: the same bits; pairs vs ws at 8,192 tokens −6 to −12 % (whole routed
# experts), at 32,768 −8 to −15 %; 2,048 slower or even; TTFT 32k −10 to −20 ms; W1 +2-4 %.
source bench/gpu/call_prelude.sh main fp8mc
timeout 150 /tmp/fp8mc/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|hang|abort" "$O/fp8_grouped.txt" | head -8
timeout 150 /tmp/fp8mc/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
  --nocapture > "$O/timing.txt" 2>&1
echo "timing rc $? (t=$SECONDS)"; grep fp8_grouped_timing "$O/timing.txt" | sed 's/, dequant + bf16.*fp8 tiles/ ... tiles/' | cut -c1-170
for v in main fp8mc; do
  timeout 100 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 3 --warmup 1 > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|run [0-9]" "$O/ttft-$v.txt" | cut -c1-100
done
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
for v in main fp8mc; do
  [ $SECONDS -lt 330 ] || break
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971
done
cd "$O" && tar -czf w1.tgz w1-*.json serve-*.log 2>/dev/null; rm -f "$O"/w1-*.txt "$O"/w1-*.json "$O"/serve-*.log
