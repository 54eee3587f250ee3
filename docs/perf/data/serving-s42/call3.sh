#!/usr/bin/env bash
# Session 42, call 3 (H200, warm after call 2; carry [".devbin/head"]: main, code ae32bcf): the
# single-request bars on the bar's card — TTFT at 2k / 8k / 32k and batch-1 decode after each
# (64 steps), FP8 preset and bf16 (serving-s41/next/call.sh's first part, without its clock
# sampling, 8k added). Predictions (written in session 41, that script): FP8 32k 470–480 ms;
# FP8 decode after 2k 515–525 tok/s; bf16 decode 419 / 388 unchanged.
source bench/gpu/call_prelude.sh head; B=/tmp/head/h/headroom
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  timeout 140 $B bench ttft --backend cuda --synthetic $m --lengths 2048,8192,32768 --iterations 3 --warmup 1 \
    --decode 64 --json "$O/bars-$m.json" > "$O/bars-$m.txt" 2>&1
  echo "bars $m rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$m.txt" | cut -c1-150
done
