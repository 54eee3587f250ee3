#!/usr/bin/env bash
# Session 23, call 3: after the fix of the tables held during a capture
# (26ecd30; binaries: serving-s23/next/build.sh at that commit). The ttft
# arms again (the graph arms failed in call 2), the engine's graph tests with
# their corrected counts, then W1 plain / overlap / overlap + graphs.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
N=docs/perf/data/serving-s23/next/run.sh
SECONDS=0
OUT="$O/ttft" bash $N ttft > /dev/null 2>&1; grep -v "^engine:" "$O/ttft/log-ttft.txt" | cut -c1-900
echo "t=$SECONDS"
OUT="$O/tests" bash $N tests > /dev/null 2>&1; sed -n '/=== graphs/,$p' "$O/tests/log-tests.txt"
echo "t=$SECONDS"
T=/tmp/s23next; B=$T/h/headroom
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
for arm in "plain off off" "overlap on off" "both on on"; do
  set -- $arm
  $B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8920 --step-overlap $2 --cuda-graphs $3 \
    > "$O/serve-w1-$1.log" 2>&1 &
  sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-w1-$1.log" && break; sleep 0.5; done
  timeout 120 $B bench serve --url http://127.0.0.1:8920 --json "$O/w1-$1.json" --concurrency 512 \
    --requests 1000 --prompt-len 1024 --max-tokens 128 > "$O/w1-$1.txt" 2>&1
  echo "w1 $1: $(grep -E 'output tok/s' "$O/w1-$1.txt" | head -1)"
  grep -E "TTFT|ITL" "$O/w1-$1.txt" | head -2
  grep -iE "graph|error" "$O/serve-w1-$1.log" | head -3
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
done
