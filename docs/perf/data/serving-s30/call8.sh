#!/usr/bin/env bash
# Session 30, call 8: W1 (1,000 x 1,024 / 128, c = 512) on the FP8 preset,
# fresh server, default flags, main (the activations measured at start-up).
# Build: bash bench/gpu/pack_bins.sh .devbin/next; carry [".devbin/next"].
source bench/gpu/env.sh >/dev/null; export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next; B=$T/h/headroom; mkdir -p $T; tar -xJf .devbin/next/bins.tar.xz -C $T
O=${OUT:-/tmp/out}; mkdir -p "$O"; SECONDS=0
$B serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8921 > $O/serve-w1.log 2>&1 & sp=$!
for _ in $(seq 1 300); do grep -q "listening on" $O/serve-w1.log && break; sleep 0.5; done
grep -E "^serve on cuda" $O/serve-w1.log | grep -oE "up to [0-9]+ running, context [0-9]+|step activations.*"
timeout 110 $B bench serve --url http://127.0.0.1:8921 --json $O/w1-fp8.json --concurrency 512 \
  --requests 1000 --prompt-len 1024 --max-tokens 128 > $O/w1-fp8.txt 2>&1
grep -E "output tok/s|^ttft|^itl|^server" $O/w1-fp8.txt | cut -c1-300
kill -TERM $sp; wait $sp
