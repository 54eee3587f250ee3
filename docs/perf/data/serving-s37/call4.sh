#!/usr/bin/env bash
# Session 37, call 4 (H200 preferred; carry [".devbin/main"]: main packed by
# bench/gpu/pack_bins.sh .devbin/main; refused in session 37, prepared for the next):
# where a 32k prompt's TTFT goes now (the FP8 bar is 450 ms; call 1: 504.2),
# for the next session's plan: bench ttft --lengths 32768 --breakdown, FP8
# and bf16 (one profiled run each after the timed ones; the profile
# synchronises between parts, so its sum exceeds the TTFT).
source bench/gpu/call_prelude.sh main
B=/tmp/main/h/headroom
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  timeout 150 $B bench ttft --backend cuda --synthetic $m --lengths 32768 --iterations 3 --warmup 1 \
    --breakdown --json "$O/breakdown-$m.json" > "$O/breakdown-$m.txt" 2>&1
  echo "--- $m rc $? t=$SECONDS"; grep -vE "tokens, run" "$O/breakdown-$m.txt" | cut -c1-160 | tail -40
done
