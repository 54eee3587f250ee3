#!/usr/bin/env bash
# Session 18, call 4: the bars on one machine, main (65c628a's code = df98b53 + attnpdl + normrow):
# batch-1 TTFT and decode (bf16 and FP8 presets), W1 bf16 and FP8, W2's first 100 s, W3.
# Binary: .devbin/s18c3/bins.tar.xz's A (main's headroom, release).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c3; mkdir -p $T && tar -xJf .devbin/s18c3/bins.tar.xz -C $T
B=$T/A
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
{
for m in $M $M-fp8; do
  timeout 200 $B/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 --json "$O/ttft-$m.json" 2>&1 \
    | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$m /"
done
serve_run() { # NAME MODEL ARGS...
  local name=$1 model=$2; shift 2
  $B/headroom serve --backend cuda --synthetic $model --port 8920 > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
  timeout 200 $B/headroom bench serve --url http://127.0.0.1:8920 --json "$O/$name.json" "$@" > "$O/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$O/$name.txt" | head -1)"
  grep -E "TTFT|ITL|preempt" "$O/$name.txt" | head -4
  kill -TERM $sp; wait $sp
}
serve_run w1 $M --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-fp8 $M-fp8 --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w3 $M --concurrency 16 --requests 16 --prompt-len 32768 --max-tokens 256
serve_run w2 $M --concurrency 200 --requests 400 --prompt-len 1000 --max-tokens 2000 --time-limit-s 100
} > "$O/log.txt" 2>&1
cd "$O" && tar -czf runs.tgz w1* w2* w3* serve-* ttft-* && rm -f w1* w2* w3* serve-* ttft-*
cat "$O/log.txt"
