#!/usr/bin/env bash
# Session 17, call 2 (main 3618811 + the conv-advance commit; binaries in .devbin/s17b/bins.tar.xz:
# headroom and the backend_ops test binary). (1) the new kernels' GPU tests and memcheck:
# the greedy argmax (16-byte slices) and the conv tests (the 8-channel state advance);
# (2) W1's mixed step 45 under ncu with one metric (gpu__time_duration: one pass, no replay —
# call 1's six metrics needed kernel replay, whose memory save failed beside a server holding
# 90 % of the device), kernels summed by name (call 1's sum.py).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s17b; mkdir -p $B && tar -xJf .devbin/s17b/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
{
echo "=== (1) tests"
timeout 120 $B/backend_ops --ignored --test-threads 1 greedy conv1d 2>&1 | grep -E "^test |test result|panicked" 
for t in greedy_rows_of_eights_take_16_byte_loads_and_the_same_rule conv1d_k4x8_matches_cpu_across_strips_sequences_and_calls; do
  timeout 120 compute-sanitizer --tool memcheck --print-limit 6 --error-exitcode 9 $B/backend_ops --ignored --exact $t 2>&1 | grep -E "ERROR SUMMARY|test result"
done
echo "=== (2) W1 mixed step 45, one metric"
HEADROOM_PROFILE_STEP=45 timeout 260 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
  --launch-count 1100 --csv --log-file "$O/ncu-mixed.csv" --target-processes all \
  $B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8901 --warmup off > "$O/serve-mixed.log" 2>&1 &
SP=$!
for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-mixed.log" && break; sleep 0.5; done
timeout 200 $B/headroom bench serve --url http://127.0.0.1:8901 --concurrency 512 --requests 512 --prompt-len 1024 \
  --max-tokens 128 > "$O/bench-mixed.txt" 2>&1; echo "bench rc $?"
pkill -TERM -x headroom; wait $SP
tail -3 "$O/serve-mixed.log"
python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-mixed.csv" > "$O/sum-mixed.txt" 2>&1; head -40 "$O/sum-mixed.txt"
} > "$O/log.txt" 2>&1
gzip -f "$O/ncu-mixed.csv"
cat "$O/log.txt"
