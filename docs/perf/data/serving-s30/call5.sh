#!/usr/bin/env bash
# Session 30, call 5: branch `calib` (step activations measured at start-up)
# against main + splitalloc (`headroom-base`), one H100. Call 6 ran it again
# as `call5.sh headroom-third call6` (call6.sh): the baseline binary and the
# log's name are its two arguments.
#  1. the GPU test cuda_memory (every case printed: measured, predicted);
#  2. fresh servers, default flags, bf16 35B: start-up line; 512 x 1,024 /
#     128 at c = 256; 128 x 1,024 / 256 at c = 64; two 32,000-token prompts
#     alone; nvidia-smi peak; the server's memory line;
#  3. the FP8 preset's start-up line on the branch.
# Build: cargo build --release -p headroom; cargo test --release -p
#   headroom-engine --test cuda_memory --no-run; copy both and main +
#   splitalloc's headroom as headroom-base into .devbin/calib (stripped).
#   carry [".devbin/calib"].
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=.devbin/calib
BASE=${1:-headroom-base}
LOG=${2:-call5}
SECONDS=0
{
echo "card: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
timeout 200 $B/cuda_memory --ignored --nocapture --test-threads 1 2>&1 | grep -vE "^\s*$|^note:|backtrace"
echo "rc ${PIPESTATUS[0]} t=$SECONDS"
for b in headroom $BASE; do
  $B/$b serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8950 > "$O/serve-$b.log" 2>&1 &
  sp=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$O/serve-$b.log" && break; sleep 0.5; done
  echo "--- $b (t=$SECONDS)"
  grep -E "^serve on cuda" "$O/serve-$b.log" | grep -oE "solo_stripe [0-9]+; up to [0-9]+ running, context [0-9]+|KV pool [^;]*; [0-9]+ state slots|step activations.*"
  (while sleep 0.5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done > "$O/smi-$b.txt") &
  smi=$!
  timeout 100 $B/headroom bench serve --url http://127.0.0.1:8950 --json "$O/c256-$b.json" \
    --concurrency 256 --requests 512 --prompt-len 1024 --max-tokens 128 > "$O/c256-$b.txt" 2>&1
  echo "c256 rc $?"; grep -E "output tok/s|^server" "$O/c256-$b.txt" | cut -c1-330
  timeout 80 $B/headroom bench serve --url http://127.0.0.1:8950 --json "$O/c64-$b.json" \
    --concurrency 64 --requests 128 --prompt-len 1024 --max-tokens 256 > "$O/c64-$b.txt" 2>&1
  echo "c64 rc $?"; grep -E "output tok/s" "$O/c64-$b.txt" | cut -c1-200
  timeout 50 $B/headroom bench serve --url http://127.0.0.1:8950 --json "$O/l32-$b.json" \
    --concurrency 1 --requests 2 --prompt-len 32000 --max-tokens 1 > "$O/l32-$b.txt" 2>&1
  grep -E "^ttft|^server" "$O/l32-$b.txt" | cut -c1-330
  kill $smi; echo "smi peak (MiB): $(sort -n "$O/smi-$b.txt" | tail -1)"
  grep -ciE "out of memory|CUDA_ERROR" "$O/serve-$b.log"
  kill -TERM $sp; wait $sp
done
echo "--- FP8 preset start-up (t=$SECONDS)"
$B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8951 > "$O/serve-fp8.log" 2>&1 &
sp=$!
for _ in $(seq 1 300); do grep -q "listening on" "$O/serve-fp8.log" && break; sleep 0.5; done
grep -E "^serve on cuda" "$O/serve-fp8.log" | grep -oE "solo_stripe [0-9]+; up to [0-9]+ running, context [0-9]+|step activations.*"
kill -TERM $sp; wait $sp
echo "t=$SECONDS"
} 2>&1 | tee "$O/$LOG-log.txt"
