#!/usr/bin/env bash
# Prepared in session 32 for a next session lent only an H100 (as sessions
# 27-32 were): where the FP8 W1 mixed step's time goes after sessions 31-32
# (the padded FP8 GEMMs, the codes written by the norms), to pick the next
# kernel. One call of ≈ 250 s, binaries of main:
#   bash bench/gpu/pack_bins.sh .devbin/next; carry [".devbin/next"].
# 1. One W1 mixed step of the FP8 preset under ncu (one metric, kernels
#    serialised): a server with --warmup off and HEADROOM_PROFILE_STEP=35
#    (the window spans step 36: 8 prompts of 1,024 rows + ≈ 280 decode
#    rows, before the H100's ≈ 349 running sequences are all admitted),
#    loaded by W1 for 20 s; summed by session 13's ncu_sum.py. Stop the
#    server, never ncu (ncu writes its log as its target exits).
# 2. W1 FP8 on a fresh server (no ncu): the absolute figure on this card
#    (session 32's last: 5,258.9 output tok/s).
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
head -40 "$O/sum-fp8.txt"
gzip -f "$O/ncu-fp8.csv"
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
w1 fp8-next $B qwen3.6-35b-a3b-fp8 8971
