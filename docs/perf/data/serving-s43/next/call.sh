#!/usr/bin/env bash
# Prepared in session 43 for the next session's first call (any sm_90a card; ≈ 540 s; carry
# [".devbin/head", ".devbin/fold"]):
#   head = main, packed by `bash bench/gpu/pack_bins.sh .devbin/head headroom-hardware:lib`;
#   fold = branch combnorm2 (next/combnorm2.patch on main), packed by
#          `bash bench/gpu/pack_bins.sh .devbin/fold headroom-cuda:fp8_backend` from it.
# 1. bench/gpu/check_clock.sh on head (session 43's one failed check, a 0 J window, fixed in
#    6214f0f: prediction — passes, the 512-token window's energy null or > 0).
# 2. combnorm2's bits (fp8_backend norm_fold, norm_codes, the FP8 block against f64) and its
#    kernels under ncu against head's (an FP8 8k prefill's combine and norm launches).
# 3. FP8 TTFT 8k / 32k alternating head, fold, head, fold, with the clock and energy lines.
# 4. On an H200 only, with the time left: W1 FP8 head then fold (the bar's card).
# Prediction (next/README.md, written in session 43): the fused launch 185–205 µs a layer at 8k
# against 212.9 (H100), FP8 TTFT 32k −0.3 to −0.8 %, W1 FP8 +0.3 to +1 %.
source bench/gpu/call_prelude.sh head fold
OUT=$O bash bench/gpu/check_clock.sh /tmp/head/h > "$O/check_clock.txt" 2>&1
echo "check_clock rc $? (t=$SECONDS)"; grep -E "check_clock:|J a run" "$O/check_clock.txt" | cut -c1-160
F=/tmp/fold/h
(cd "$O" && timeout 150 $F/fp8_backend --ignored --test-threads 1 norm_fold norm_codes \
  the_moe_block_on_fp8_experts > "$O/fp8_backend.txt" 2>&1; echo "fp8_backend rc $? (t=$SECONDS)")
grep -E "^test |test result" "$O/fp8_backend.txt" | cut -c1-160
for v in head fold; do
  HEADROOM_PROFILE_STEP=1 timeout 90 ncu --profile-from-start off --kernel-name regex:'moe_combine|add_rms_norm_quad' \
    --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none \
    /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 8192 --iterations 1 \
    --warmup 1 > "$O/ncu-$v.csv" 2> "$O/ncu-$v.err"
  echo "ncu $v rc $? (t=$SECONDS)"
  python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$v.csv" | head -8 | cut -c1-90
done
gzip -f "$O"/ncu-*.csv 2>/dev/null
for v in head fold head fold; do
  timeout 80 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 8192,32768 \
    --iterations 3 --warmup 1 >> "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS): $(grep -E 'tokens  TTFT' "$O/ttft-$v.txt" | tail -2 | cut -c1-50 | tr '\n' ' ')"
  grep -E "clock over" "$O/ttft-$v.txt" | tail -1 | cut -c1-200
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  source docs/perf/data/serving-s31/w1_arm.sh
  [ $SECONDS -lt 420 ] && w1 head /tmp/head/h/headroom qwen3.6-35b-a3b-fp8 8461
  [ $SECONDS -lt 480 ] && w1 fold $F/headroom qwen3.6-35b-a3b-fp8 8462
fi
