#!/usr/bin/env bash
# Session 17, call 1 (main 9b8e1c1's headroom, from .devbin/s17/bins.tar.xz): where W1's two
# kinds of step go, kernel by kernel, against DRAM and L2: ncu with six metrics (duration, SM,
# DRAM and L2 throughput, DRAM bytes read and written), --clock-control none, over the whole
# mixed step 45 (8 prompts of 1,024 + the running decode rows) and the decode-only step 100 (512
# rows), each in its own server loaded by W1's shape; summed by kernel name with sum.py.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s17; mkdir -p $B && tar -xJf .devbin/s17/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
D=docs/perf/data/serving-s17/call1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,dram__bytes_write.sum
prof() { # NAME STEP COUNT
    local name=$1 step=$2 count=$3 port=$4
    HEADROOM_PROFILE_STEP=$step timeout 280 $NCU --profile-from-start off --clock-control none --metrics $M \
      --launch-count $count --csv --log-file "$O/ncu-$name.csv" --target-processes all \
      $B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port $port --warmup off > "$O/serve-$name.log" 2>&1 &
    local sp=$!
    for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
    timeout 200 $B/headroom bench serve --url http://127.0.0.1:$port --concurrency 512 --requests 512 --prompt-len 1024 \
      --max-tokens 128 > "$O/bench-$name.txt" 2>&1; echo "$name bench rc $?"
    pkill -TERM -x headroom; wait $sp
    python3 $D/sum.py "$O/ncu-$name.csv" > "$O/sum-$name.txt" 2>&1; head -45 "$O/sum-$name.txt"
}
{
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
echo "=== mixed step 45"; prof mixed 45 1100 8901
echo "=== decode-only step 100"; prof decode 100 800 8902
} > "$O/log.txt" 2>&1
cd "$O" && tar -czf ncu.tgz ncu-*.csv serve-*.log bench-*.txt && rm -f ncu-*.csv serve-*.log bench-*.txt
cat "$O/log.txt"
