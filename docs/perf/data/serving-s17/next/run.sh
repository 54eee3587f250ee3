#!/usr/bin/env bash
# Planned first GPU call of the next session (not run). Build on the build machine into
# .devbin/n18/bins.tar.xz (carry .devbin/n18), stripped: headroom (cargo build --release -p
# headroom) and the test binaries decode_moe, fused_decode, backend_ops (cargo test --release -p
# headroom-cuda --test NAME --no-run) and cuda_engine (-p headroom-engine).
# (1) main's GPU checks of session 17's kernels at once (each ran on the H200 in its own call:
#     data/serving-s17/call{2,3,4,7,8}); (2) the bars on one machine: batch-1 TTFT/decode bf16
#     and FP8, W1 bf16 and FP8, W2's first 100 s, W3.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n18; mkdir -p $B && tar -xJf .devbin/n18/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
{
echo "=== (1) tests"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|FAILED|panicked"
timeout 100 $B/fused_decode --ignored --test-threads 1 2>&1 | grep -E "test result|FAILED|panicked"
timeout 100 $B/backend_ops --ignored --test-threads 1 2>&1 | grep -E "test result|FAILED|panicked"
timeout 200 $B/cuda_engine --ignored --nocapture --test-threads 1 > "$O/engine.txt" 2>&1; echo "cuda_engine rc $? (the default-mode batch/chunk and 255-others tests fail at their known places)"
grep -E "worst|panicked at" "$O/engine.txt" | head -20
echo "=== (2) bars"
for m in $M $M-fp8; do
  timeout 240 $B/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 --json "$O/ttft-$m.json" 2>&1 | grep -E "TTFT"
done
serve_run() { # NAME MODEL ARGS...
  local name=$1 model=$2; shift 2
  $B/headroom serve --backend cuda --synthetic $model --port 8920 > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
  timeout 200 $B/headroom bench serve --url http://127.0.0.1:8920 --json "$O/$name.json" "$@" > "$O/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$O/$name.txt" | head -1)"
  kill -TERM $sp; wait $sp
}
serve_run w1 $M --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-fp8 $M-fp8 --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w2 $M --concurrency 200 --requests 400 --prompt-len 1000 --max-tokens 2000 --time-limit-s 100
serve_run w3 $M --concurrency 16 --requests 16 --prompt-len 32768 --max-tokens 256
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
