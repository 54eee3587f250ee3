#!/usr/bin/env bash
# Session 42, call 5 (H200, warm; carry [".devbin/head"]): W2's first 100 s on the bf16 default
# (400 x 1,000 / 2,000 at c = 200; bar 9,000 output tok/s; serving-s41/next/call.sh's W2).
# Prediction (session 41, that script): 6,750–6,850.
source bench/gpu/call_prelude.sh head; source docs/perf/data/serving-s31/w1_arm.sh
B=/tmp/head/h/headroom; M=qwen3.6-35b-a3b
$B serve --backend cuda --synthetic $M --port 8973 > "$O/serve-w2.log" 2>&1 & sp=$!
if serve_listening "$O/serve-w2.log" $sp 200; then
  timeout 130 $B bench serve --url http://127.0.0.1:8973 --json "$O/w2.json" --concurrency 200 --requests 400 \
    --prompt-len 1000 --max-tokens 2000 --time-limit-s 100 > "$O/w2.txt" 2>&1
  echo "w2: $(grep 'output tok/s' "$O/w2.txt" | head -1) (t=$SECONDS)"
fi
kill -TERM $sp; wait $sp
