#!/usr/bin/env bash
# Prepared in session 35 (any sm_90a card; ≈ 150 s): session 33 call 4 again on
# main d5f164c (.devbin/next, the FP8 ws GEMMs merged): one FP8 W1 mixed
# step (36) under ncu, kernels serialised, summed by session 13's ncu_sum.py:
# the step's parts after the ws kernels, against serving-s33/call4/sum-fp8.txt, to pick the
# next FP8 target by data (docs/perf/cuda-fp8.md, session 35's reasoning).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next; mkdir -p $T && tar -xJf .devbin/next/bins.tar.xz -C $T
B=$T/h/headroom
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
HEADROOM_PROFILE_STEP=35 ncu --profile-from-start off --metrics gpu__time_duration.sum --cache-control none \
  --clock-control none --csv --log-file "$O/ncu-fp8.csv" --target-processes all \
  $B serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8931 --warmup off \
  --log info,headroom_engine=debug > "$O/serve-ncu.log" 2>&1 &
sp=$!
for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-ncu.log" && break; sleep 0.5; done
timeout 60 $B bench serve --url http://127.0.0.1:8931 --concurrency 512 --requests 512 --prompt-len 1024 \
  --max-tokens 128 --time-limit-s 20 > "$O/bench-ncu.txt" 2>&1
pkill -TERM -x headroom; wait $sp
echo "ncu arm: t=$SECONDS"
grep "engine step" "$O/serve-ncu.log" | sed -n 35,37p | cut -c1-300
python3 docs/perf/data/serving-s13/call1/ncu_sum.py "$O/ncu-fp8.csv" > "$O/sum-fp8.txt" 2>&1
head -45 "$O/sum-fp8.txt"
gzip -f "$O/ncu-fp8.csv"
rm -f "$O/serve-ncu.log.gz"; gzip -f "$O/serve-ncu.log"
