#!/usr/bin/env bash
# Session 21, call 4 (main 14b4bed, the session's merged kernels): the
# engine's GPU tests (batch/chunk invariance, the request among 255
# others); one batch-1 decode step after 2,048 tokens kernel by kernel
# (ncu, one metric, kernels serialised; HEADROOM_PROFILE_STEP=6 opens the
# window on the 7th engine step), bf16 and FP8, summed by
# data/serving-s17/call1/sum.py (session 18 call 6 took the same table);
# then W1 bf16 and FP8 (fresh servers, default flags): the decode kernels
# now on the tensor cores take the runs' tails (<= 8 rows a step).
# Binaries (.devbin/s21d/bins.tar.xz): h = headroom and cuda_engine at 14b4bed.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21d; mkdir -p $T && tar -xJf .devbin/s21d/bins.tar.xz -C $T
B=$T/h
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
SECONDS=0
{
echo "=== cuda_engine"
timeout 240 $B/cuda_engine --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |worst|tokens|test result|panicked" | head -40
echo "t=$SECONDS"
for m in $M $M-fp8; do
  HEADROOM_PROFILE_STEP=6 timeout 200 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
    --cache-control none --clock-control none \
    $B/headroom bench ttft --backend cuda --synthetic $m --lengths 2048 --iterations 1 --warmup 1 --decode 16 \
    > "$O/ncu-$m.csv" 2> "$O/ncu-$m.err"
  echo "== ncu $m (rc $?)"
  python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$m.csv" | head -40
  echo "t=$SECONDS"
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
  echo "t=$SECONDS"
}
serve_run w1 $M --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-fp8 $M-fp8 --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
} > "$O/log.txt" 2>&1
cd "$O" && gzip -f ncu-*.csv; tar -czf runs.tgz w1* serve-* && rm -f w1* serve-*
cat "$O/log.txt"
