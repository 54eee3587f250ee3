#!/usr/bin/env bash
# Session 43, call 1 (any sm_90a card; ≈ 300 s; carry [".devbin/clock", ".devbin/head"]):
# session 42's call 8 as written (its header: clock = main 141439e packed by
#   bash bench/gpu/pack_bins.sh .devbin/clock headroom-hardware:lib
# head = main before the NVML sampling), then every kernel of one bf16 prefill step of 8,192
# tokens under ncu (as session 41's call 3 did for FP8), to rank W1 bf16's levers: W1's steps are
# ≈ 8,192 mixed rows, and the bf16 breakdown was never taken.
# Prediction (bf16 8k, kernels serialised): the routed bf16 GEMMs (gate+up + down) 30–35 % of
# the step's kernel time (≈ 0.8 ms a layer), attention ≈ 10 %, the dense bf16 GEMMs ≈ 20 %,
# combine + add-norms ≈ 10–12 %.
bash docs/perf/data/serving-s42/call8.sh
echo "call8 rc $? (t=$SECONDS)"
O=${OUT:-/tmp/out}
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/clock/h/headroom
HEADROOM_PROFILE_STEP=1 timeout 200 ncu --profile-from-start off \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
  --cache-control none --clock-control none \
  $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192 --iterations 1 --warmup 1 \
  > "$O/ncu-bf16-8192.csv" 2> "$O/ncu-bf16-8192.err"
echo "== ncu bf16 8192 (rc $?, t=$SECONDS)"
python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-bf16-8192.csv" | head -42 | cut -c1-120
gzip -f "$O"/ncu-*.csv 2>/dev/null
# Then W1 on the FP8 preset and on bf16 with the server's GPU sampled (bench serve's `gpu:` line):
# is a W1 run power-bound like the 32k prefill? Prediction: on an H200 the mixed steps hold the
# card at its 700 W limit most of the run (power-capped share 50–80 %), SM clock mean 1,650–1,850
# MHz; ≈ 0.3–0.5 J a generated token on W1 (≈ 650 W × 22 s / 128,000); throughput as session 42's
# (FP8 6,750–6,850, bf16 5,650–5,750) if the sampling costs nothing.
source docs/perf/data/serving-s31/w1_arm.sh
if [ $SECONDS -lt 380 ]; then w1 fp8 $B qwen3.6-35b-a3b-fp8 8431; fi
if [ $SECONDS -lt 470 ]; then w1 bf16 $B qwen3.6-35b-a3b 8432; fi
