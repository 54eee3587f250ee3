#!/usr/bin/env bash
# Session 14 call C (branch gdnland af0b0b3): GDN tests of every width, memcheck,
# bench + crossover, TTFT 8k/32k, W1 twice, W2 first 100 s.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/c14c; mkdir -p $B && tar -xJf .devbin/c14c/bins.tar.xz -C $B
R=$O/log.txt
{
echo "=== gather t=$(el)"
$B/backend_ops --ignored --test-threads 1 gather 2>&1 | grep -E "^test |test result|panicked"
echo "=== gdn tests t=$(el)"
timeout 240 $B/gdn --ignored --test-threads 1 --skip bench_ > "$O/gdn-tests.txt" 2>&1
echo "gdn tests rc $?"
grep -E "^test |test result|panicked" "$O/gdn-tests.txt"
echo "=== gdn memcheck t=$(el)"
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/gdn --ignored \
    --test-threads 1 varlen_batch_with_slots_gqa_and_initial_state decode_batch_runs_every_sequence_in_one_call > "$O/memcheck.txt" 2>&1
echo "memcheck rc $?"; tail -3 "$O/memcheck.txt"
echo "=== gdn racecheck (full) t=$(el)"
GDN_CHECK_WIDTHS=full timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 $B/gdn --ignored \
    --test-threads 1 --exact varlen_batch_with_slots_gqa_and_initial_state > "$O/racecheck.txt" 2>&1
echo "racecheck rc $?"; tail -3 "$O/racecheck.txt"
echo "=== gdn bench t=$(el)"
timeout 200 $B/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture > "$O/bench.txt" 2>&1
echo "bench rc $?"; grep -E "gdn_bench|gdn_split|gdn_cross|panicked" "$O/bench.txt"
echo "=== ttft t=$(el)"
timeout 80 $B/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
    --iterations 3 --json "$O/ttft.json" > "$O/ttft.txt" 2>&1; echo "rc $?"; grep -E "TTFT" "$O/ttft.txt"
port=8400
for run in 1 2; do
  port=$((port+1))
  echo "=== W1 run $run t=$(el)"
  $B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port $port > "$O/serve-w1-$run.log" 2>&1 &
  SP=$!
  for i in $(seq 1 240); do grep -q "listening on" "$O/serve-w1-$run.log" && break; sleep 0.5; done
  timeout 90 $B/headroom bench serve --url http://127.0.0.1:$port --concurrency 512 --requests 1000 \
      --prompt-len 1024 --max-tokens 128 --json "$O/w1-$run.json" > "$O/w1-$run.txt" 2>&1; echo "w1 rc $?"
  grep -E "requests at|output tok/s" "$O/w1-$run.txt"
  kill -TERM $SP; wait $SP
done
if [ $(el) -lt 330 ]; then
  echo "=== W2 first 100 s t=$(el)"
  $B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8410 > "$O/serve-w2.log" 2>&1 &
  SP=$!
  for i in $(seq 1 240); do grep -q "listening on" "$O/serve-w2.log" && break; sleep 0.5; done
  timeout 130 $B/headroom bench serve --url http://127.0.0.1:8410 --concurrency 200 --requests 400 \
      --prompt-len 1000 --max-tokens 2000 --time-limit-s 100 --json "$O/w2.json" > "$O/w2.txt" 2>&1; echo "w2 rc $?"
  grep -E "requests at|output tok/s|ITL" "$O/w2.txt"
  kill -TERM $SP; wait $SP
fi
echo "done t=$(el)"
} > "$R" 2>&1
cat "$R"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz ! -name log.txt -delete
