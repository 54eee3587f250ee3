#!/usr/bin/env bash
# Planned first GPU call of the next session (not run). Build on the build machine into
# .devbin/n17/bins.tar.xz (carry .devbin/n17): headroom (cargo build --release -p headroom) and the
# cuda_engine and moe test binaries (cargo test --release -p headroom-engine --test cuda_engine
# --no-run; cargo test --release -p headroom-cuda --test moe --no-run), stripped.
# (1) main's GPU checks of session 16 again (invariance tests in both modes, the families test,
#     the Ws tests); (2) a roofline of W1's mixed step that fits the time: one pass of five
#     metrics (--metrics, not --section: call 5's SpeedOfLight sections outran 200 s) over the
#     first 400 kernels of step 45, summed by session 16's call5/sol_sum.py (same metric names:
#     see the rename below).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n17; mkdir -p $B && tar -xJf .devbin/n17/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) engine and moe checks"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 > "$O/engine.txt" 2>&1; echo "cuda_engine rc $? (the default-mode batch/chunk test fails at its known place)"
grep -E "worst|panicked at" "$O/engine.txt" | head -20
timeout 200 $B/moe --ignored --test-threads=1 --skip bench_the_35b --skip timing_ > "$O/moe.txt" 2>&1; echo "moe rc $?"
grep -E "test result|FAILED" "$O/moe.txt" | head -4
echo "=== (2) W1 mixed step 45: five metrics, first 400 kernels"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
HEADROOM_PROFILE_STEP=45 timeout 300 $NCU --profile-from-start off --metrics $M --launch-count 400 --csv \
  --log-file "$O/ncu-mixed.csv" --target-processes all \
  $B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8901 --warmup off > "$O/serve-ncu.log" 2>&1 &
SP=$!
for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-ncu.log" && break; sleep 0.5; done
timeout 240 $B/headroom bench serve --url http://127.0.0.1:8901 --concurrency 512 --requests 512 --prompt-len 1024 \
  --max-tokens 128 > "$O/bench-ncu.txt" 2>&1; echo "bench rc $?"
pkill -TERM -x headroom; wait $SP
# sol_sum.py reads SpeedOfLight's names: map the metrics onto them.
sed -e 's/gpu__time_duration.sum/Duration/' -e 's/sm__throughput.avg.pct_of_peak_sustained_elapsed/Compute (SM) Throughput/' \
    -e 's/gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed/Memory Throughput/' \
    -e 's/dram__throughput.avg.pct_of_peak_sustained_elapsed/DRAM Throughput/' \
    -e 's/lts__throughput.avg.pct_of_peak_sustained_elapsed/L2 Cache Throughput/' "$O/ncu-mixed.csv" > "$O/ncu-mixed-named.csv"
python3 docs/perf/data/serving-s16/call5/sol_sum.py "$O/ncu-mixed-named.csv" > "$O/sol-mixed.txt" 2>&1; head -40 "$O/sol-mixed.txt"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
