#!/usr/bin/env bash
# Session 38, call 1 (any sm_90a card, H200 preferred; ≈ 330 s; carry [".devbin/main"]: main
# packed by bench/gpu/pack_bins.sh .devbin/main headroom-cuda:fp8_grouped).
# 1. session 37's prepared call 4: where a 32k prompt's TTFT goes now, FP8 and bf16
#    (bench ttft --lengths 32768 --breakdown; one profiled run after the timed ones).
# 2. one batch-1 decode step after 2,048 tokens kernel by kernel (ncu, gpu__time_duration,
#    kernels serialised; HEADROOM_PROFILE_STEP=6 opens the window on a decode step), FP8 and
#    bf16, with CUDA graphs on (ncu profiles a graph's kernel nodes one by one): session 18's
#    table (data/serving-s18/call6) after sessions 19-37, for the decode bars' next step.
source bench/gpu/call_prelude.sh main
B=/tmp/main/h/headroom
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  timeout 150 $B bench ttft --backend cuda --synthetic $m --lengths 32768 --iterations 3 --warmup 1 \
    --breakdown --json "$O/breakdown-$m.json" > "$O/breakdown-$m.txt" 2>&1
  echo "--- $m rc $? t=$SECONDS"; grep -vE "tokens, run" "$O/breakdown-$m.txt" | cut -c1-160 | tail -40
done
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  [ $SECONDS -lt 450 ] || break
  HEADROOM_PROFILE_STEP=6 timeout 120 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
    --cache-control none --clock-control none \
    $B bench ttft --backend cuda --synthetic $m --lengths 2048 --iterations 1 --warmup 1 --decode 16 \
    > "$O/ncu-$m.csv" 2> "$O/ncu-$m.err"
  echo "== ncu $m (rc $?, t=$SECONDS)"
  python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$m.csv" | head -45
done
gzip -f "$O"/ncu-*.csv 2>/dev/null; true
