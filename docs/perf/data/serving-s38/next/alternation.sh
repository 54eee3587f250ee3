#!/usr/bin/env bash
# Prepared in session 38 (any sm_90a card, H200 preferred; ≈ 120 s; carry [".devbin/main"]:
# main from bfeacf3 on, packed by bench/gpu/pack_bins.sh .devbin/main): the 32k runs'
# alternation (every series since session 29: e.g. 490 / 506 / 497 / 500 ms, H100 and H200,
# not the allocator, the step overlap, the graphs or the clock means; docs/perf/serving.md
# sessions 37-38) part by part — bench ttft --breakdown-each times each measured run's parts
# by device events between them, without synchronising, so a slow run and a fast one can be
# set side by side. Prediction: one or two parts carry the ≈ 15 ms (attention, whose 10
# launches are the longest kernels, or the MoE's grouped GEMMs); if every part moves in
# proportion, it is the clock after all.
source bench/gpu/call_prelude.sh main
B=/tmp/main/h/headroom
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  timeout 100 $B bench ttft --backend cuda --synthetic $m --lengths 32768 --iterations 6 --warmup 1 \
    --breakdown-each --json "$O/each-$m.json" > "$O/each-$m.txt" 2>&1
  echo "--- $m rc $? t=$SECONDS"; grep -E "tokens, run|    run [0-9]|tokens  TTFT" "$O/each-$m.txt" | cut -c1-230
done
