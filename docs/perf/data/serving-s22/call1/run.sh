#!/usr/bin/env bash
# Session 22, call 1: where a decode step's wall time goes on the GPU's own
# clock (HEADROOM_DECODE_STATS now records an event at a step's first launch
# and one before its read-back: GPU span + GPU idle between steps). Batch 1
# (bench ttft, bf16 and FP8, after 2k) and a server at 64 and 256 running
# sequences (decode-dominated loads). Binary (.devbin/s22a/bins.tar.xz):
# h/headroom = main f64ff99 + the probe (committed with the step overlap).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s22a; mkdir -p $T && tar -xJf .devbin/s22a/bins.tar.xz -C $T
B=$T/h
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
SECONDS=0
{
for m in $M $M-fp8; do
  echo "=== bench ttft $m"
  HEADROOM_DECODE_STATS=1 timeout 200 $B/headroom bench ttft --backend cuda --synthetic $m --lengths 2048 \
    --iterations 1 --warmup 1 --decode 96 2>&1 | grep -E "decode stats|tokens  TTFT" | cut -c1-400
  echo "t=$SECONDS"
done
serve_run() { # NAME ARGS...
  local name=$1; shift
  HEADROOM_DECODE_STATS=1 $B/headroom serve --backend cuda --synthetic $M --port 8920 > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
  timeout 150 $B/headroom bench serve --url http://127.0.0.1:8920 --json "$O/$name.json" "$@" > "$O/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$O/$name.txt" | head -1)"
  grep -E "ITL" "$O/$name.txt" | head -2
  grep "decode stats" "$O/serve-$name.log" | tail -4 | cut -c1-400
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
}
serve_run c64 --concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256
serve_run c256 --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
