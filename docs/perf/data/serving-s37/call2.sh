#!/usr/bin/env bash
# Session 37, call 2 (the same H200, warm; carry [".devbin/grow"]). Call 1
# refuted the allocator: no driver call in any measured run, and the 32k runs
# still alternate (bf16 576 / 557 / 575 / 564 / 569 ms). Which engine state
# alternates between requests? 1. bench ttft bf16 32k, 6 runs, default /
# --step-overlap off / --cuda-graphs off. Prediction: with the overlap off
# the runs are flat (a step's buffers outliving it into the next request's
# step would place every other request's activations elsewhere).
# 2. ncu.sh (the wide FP8 ws units in W1's mixed step).
source bench/gpu/call_prelude.sh grow
B=/tmp/grow/h/headroom
for f in "" "--step-overlap off" "--cuda-graphs off"; do
  timeout 60 $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 32768 \
    --iterations 6 --warmup 1 $f > "$O/diag.txt" 2>&1
  echo "--- [$f] rc $? t=$SECONDS"; grep -E "tokens, run|TTFT" "$O/diag.txt" | awk '{print $4, $5}' | tr '\n' ' '; echo
done
rm -f "$O/diag.txt"
bash docs/perf/data/serving-s37/ncu.sh
