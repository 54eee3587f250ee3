#!/usr/bin/env bash
# Session 29, if an H200 comes instead of the H100 the prepared call
# (serving-s28/next/call.sh) was written for: main 53ece0e on the H200.
#   1. the whole GPU suite (bench/gpu/check_all.sh, 330 s): the first run of
#      sessions 27-28's changes (pool sizing, snapshot slots from memory,
#      /metrics memory) on the card the bars are set on;
#   2. W1 (1,000 x 1,024 / 128, c = 512) on a fresh server, default flags:
#      session 26 measured 5,599.2 output tok/s on the H200; sessions 27-28
#      changed no kernel and, on an H200, no pool size (16 snapshot slots
#      still fit the sixteenth), so the prediction is the same within 1 %.
# Build: bash bench/gpu/pack_tests.sh .devbin/all; bash bench/gpu/pack_bins.sh .devbin/next
# carry [".devbin/all", ".devbin/next"].
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
bash bench/gpu/check_all.sh .devbin/all 330 2>&1 | tail -40 | tee "$O/check-log.txt"
tar -C "$O" -czf "$O/check-all.tar.gz" check-all && rm -rf "$O/check-all"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next; B=$T/h/headroom; mkdir -p $T; tar -xJf .devbin/next/bins.tar.xz -C $T
$B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8921 > "$O/serve-w1.log" 2>&1 &
sp=$!
for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-w1.log" && break; sleep 0.5; done
grep -E "serve on cuda" "$O/serve-w1.log" | cut -c1-900
timeout 150 $B bench serve --url http://127.0.0.1:8921 --json "$O/w1.json" \
  --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128 > "$O/w1.txt" 2>&1
grep -E "output tok/s|^ttft|^itl|preempt" "$O/w1.txt" | head -6
kill -TERM $sp; wait $sp; echo "server exit $?"
