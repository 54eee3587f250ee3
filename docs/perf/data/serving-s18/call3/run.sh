#!/usr/bin/env bash
# Session 18, call 3 (branch gdnsplit): the fused GDN decode step with a head's 128 value columns
# on a cluster of four 128-thread CTAs (gdn_decode_step_x4_bf16) instead of one 512-thread CTA.
# Binaries (.devbin/s18c3/bins.tar.xz): A = main (65c628a's code); B = gdnsplit (the cluster form
# as the default on sm_90) and its fused_decode / cuda_engine test binaries.
# Prediction: the same bits as the one-CTA kernel (asserted); batch 1: 32 -> 128 CTAs, the step
# -1-1.5 us a layer (decode after 2k +1-1.5 %); 512 rows 3.78 -> 3.9-4.1 TB/s of state; W1 +0.5-1 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c3; mkdir -p $T && tar -xJf .devbin/s18c3/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B)"
timeout 200 $T/B/fused_decode --ignored --nocapture --test-threads 1 --skip timing 2>&1 | grep -E "^test |test result|panicked|differ|step 0: the same" | head -40
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $T/B/fused_decode --ignored --exact small_case_for_memcheck 2>&1 | grep -E "ERROR SUMMARY|test result|panicked"
timeout 100 $T/B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked"
echo "=== timing: the two forms"
timeout 150 $T/B/fused_decode --ignored --nocapture --exact timing_the_two_forms_by_sequences 2>&1 | grep -E "timing|panicked|test result"
echo "=== bench ttft A B A B"
for run in 1 2; do for side in A B; do
  timeout 150 $T/$side/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-$side$run.json" 2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$side$run /"
done; done
echo "=== W1 A B A B"
port=8900
for run in 1 2; do for side in A B; do
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
cd "$O" && tar -czf runs.tgz w1-* serve-* ttft-* && rm -f w1-* serve-* ttft-*
cat "$O/log.txt"
