#!/usr/bin/env bash
# Session 31, call 4 (H100): the FP8 GEMM on rows padded to a multiple of 4.
# Call 3's W1 mixed step (662 rows) showed every dense FP8 projection on the
# dequantizing fallback: cuBLASLt has no block-scaled algorithm for a row
# count off the multiple of 4, and a serving step's row count is arbitrary.
#   A = .devbin/s31b (main c439e76), B = .devbin/s31c (the padded GEMM).
# 1. B's fp8_ops GEMM tests (f64, every path; the new padded-rows test; the
#    probe) and fp8_backend;
# 2. W1 on the FP8 preset (1,000 x 1,024 / 128, c = 512, default flags),
#    fresh servers A, B, A, B.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in b c; do mkdir -p /tmp/s31$v && tar -xJf .devbin/s31$v/bins.tar.xz -C /tmp/s31$v; done
H=/tmp/s31c/h
timeout 150 $H/fp8_ops --ignored --test-threads 1 gemm:: > "$O/fp8_ops.txt" 2>&1; echo "fp8_ops gemm rc $?"
grep -E "^test |test result|fp8_gemm padded|panicked" "$O/fp8_ops.txt" | tail -12
timeout 120 $H/fp8_backend --ignored --test-threads 1 > "$O/fp8_backend.txt" 2>&1; echo "fp8_backend rc $?"
grep -E "test result|panicked" "$O/fp8_backend.txt" | tail -3
w1() { # ARM BIN PORT
  $2 serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port $3 > "$O/serve-$1.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-$1.log" && break; sleep 0.5; done
  timeout 120 $2 bench serve --url http://127.0.0.1:$3 --json "$O/w1-$1.json" --concurrency 512 \
    --requests 1000 --prompt-len 1024 --max-tokens 128 > "$O/w1-$1.txt" 2>&1
  echo "$1: $(grep -E 'output tok/s' "$O/w1-$1.txt" | head -1)"
  kill -TERM $sp; wait $sp
}
SECONDS=0
w1 a1 /tmp/s31b/h/headroom 8941
w1 b1 $H/headroom 8942
w1 a2 /tmp/s31b/h/headroom 8943
w1 b2 $H/headroom 8944
echo "w1 runs: $SECONDS s"
grep -hE "^ttft|^itl" "$O"/w1-*.txt
