#!/usr/bin/env bash
# Session 18, call 2 (branch gdnside): the decode rows' GDN step beside the prefill rows' chunked
# rule on a second, high-priority stream (CudaDevice::beside). Binaries (.devbin/s18c2/bins.tar.xz):
# A = main b9354a8; B = gdnside with Overlap::PrefillBeside (prep + scan on the side stream) and
# its gdn / cuda_engine test binaries; C = gdnside with Overlap::DecodeBeside as the default.
# Prediction: the GDN rule of W1's mixed step (8 x 1,024 + 345 decode rows) 0.66 -> 0.45-0.55 ms
# a layer (the latency-bound scan leaves DRAM idle for the decode step's state stream); W1 +1.5-3 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c2; mkdir -p $T && tar -xJf .devbin/s18c2/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
start=$(date +%s)
{
echo "=== tests (B)"
timeout 150 $T/B/gdn --ignored --test-threads 1 decode_rows_beside varlen_batch decode_batch_runs nan_in_one_row 2>&1 | grep -E "test |test result|panicked|bits"
timeout 100 $T/B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked"
echo "=== bench: the mixed step's GDN rule"
GDN_BENCH_T=64 GDN_BENCH_VARIANTS=none GDN_BENCH_CROSS= GDN_BENCH_MIXED=8x1024+345,8x1024+100,4x1024+400,2x1000+200 \
  timeout 120 $T/B/gdn --ignored --nocapture --exact bench::bench_qwen36_35b_prefill_ms_per_layer 2>&1 | grep -E "gdn_mixed|panicked|test result"
echo "=== W1 A B C, interleaved"
port=8800
for run in 1 2; do for side in A B C; do
  [ $(( $(date +%s) - start )) -gt 430 ] && { echo "time: skipping $side$run"; continue; }
  port=$((port+1))
  $T/$side/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port $port > "$O/serve-$side$run.log" 2>&1 &
  sp=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$O/serve-$side$run.log" && break; sleep 0.5; done
  timeout 120 $T/A/headroom bench serve --url http://127.0.0.1:$port --concurrency 512 --requests 1000 \
    --prompt-len 1024 --max-tokens 128 --json "$O/w1-$side$run.json" > "$O/w1-$side$run.txt" 2>&1
  echo "W1 $side$run: $(grep -E 'output tok/s' "$O/w1-$side$run.txt" | head -1)"
  kill -TERM $sp; wait $sp
done; done
} > "$O/log.txt" 2>&1
cd "$O" && tar -czf w1.tgz w1-* serve-* && rm -f w1-* serve-*
cat "$O/log.txt"
