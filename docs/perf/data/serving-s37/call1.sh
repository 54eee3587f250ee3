#!/usr/bin/env bash
# Session 37, call 1 (kind nvidia-h200, needs_h200: W1 bf16 at c = 512 does not
# fit an H100; ≈ 500 s). carry [".devbin/cnt", ".devbin/grow"]:
#   cnt  = main 4b7ac57 + the allocator's driver-call counters, printed by
#          bench ttft per run (the allocation rule unchanged);
#   grow = the same + branch allocgrow's rule: a miss adds a segment unless
#          that takes the pool past the engine's memory (fraction x device);
#          only then are the shorter wholly free segments given back.
# Why: every measured 32k run of sessions 29-36 alternates (bf16 553 / 579 /
# 552 / 577 ms in session 36; session 17, before the split allocator, was
# flat at ≈ 561): the reported median (runs 1-3) is the slow mode.
# Prediction: cnt shows driver calls in the slow runs and none in the fast
# ones; grow has none after its first runs and every 32k run at the fast
# figure (bf16 ≈ 553, FP8 ≈ 500-504 ms), 2k unchanged, decode unchanged.
# 1. bench ttft --lengths 2048,32768 --iterations 5 --decode 64: bf16 cnt,
#    bf16 grow, FP8 cnt, FP8 grow.
# 2. W1 FP8 (1,000 x 1,024 / 128, c = 512) cnt, grow; W1 bf16 grow; W1 FP8 grow
#    with --step-tokens 16384 --prefill-chunk 16384 (session 12: +0.7 % on
#    bf16). Prediction: W1 FP8 6,700-6,760 on both (session 36: 6,566.9 before
#    the wide units); grow within ±1 % of cnt (its limit binds in serving); bf16
#    ≈ 5,680; 16k within ±2 %. GPU memory used at the end of each W1 printed.
source bench/gpu/call_prelude.sh cnt grow
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
for m in $M $F; do
  for v in cnt grow; do
    timeout 100 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
      --iterations 5 --warmup 1 --decode 64 > "$O/ttft-$v-$m.txt" 2>&1
    echo "--- $v $m (rc $?, t=$SECONDS)"
    grep -E "tokens, run|tokens  TTFT" "$O/ttft-$v-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-150
  done
done
w1 fp8-cnt /tmp/cnt/h/headroom $F 8971
w1 fp8-grow /tmp/grow/h/headroom $F 8971
w1 bf16-grow /tmp/grow/h/headroom $M 8971
[ $SECONDS -lt 500 ] && W1_SERVE_FLAGS="--step-tokens 16384 --prefill-chunk 16384" w1 fp8-grow16k /tmp/grow/h/headroom $F 8971
# At most 8 files come back: the W1 reports and server logs in one archive.
tar -C "$O" -czf "$O/w1.tar.gz" $(cd "$O" && ls w1-* serve-*) && rm -f "$O"/w1-* "$O"/serve-*
