#!/usr/bin/env bash
# Session 20, call 4: where a batch-1 decode step's MoE kernels spend their
# issue slots (main 68a2dc9). Calls 2-3 put more of gate_up's weight bytes
# in flight two ways (an even split of the routed columns over 264 CTAs;
# every other column through a cp.async stage) and both were slower with
# the same bits; call 1's tensor-core FP8 GEMV did not beat the FMA one.
# So: ncu's scheduler, warp-state, memory and instruction sections of one
# decode step's route (+ norm), gate_up, down and the projections' GEMV,
# bf16 and FP8 presets, kernels serialised, caches flushed (the weights are
# not in L2 in a real step either), clocks as the run leaves them.
# HEADROOM_PROFILE_STEP=6 opens the window on a decode step after 2,048
# tokens (crates/cuda/src/profile_window.rs). Binary: .devbin/s20e (A/headroom).
# (The call ran an inline parser that missed ncu's preamble lines; sum.py,
# which this script now calls, made summary.txt from the same files.)
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20e; mkdir -p $T && tar -xJf .devbin/s20e/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  HEADROOM_PROFILE_STEP=6 timeout 280 ncu --profile-from-start off --clock-control none \
    -k regex:'moe_decode_(route_norm|gate_up|down)|gemv_c' --launch-count 7 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section InstructionStats \
    --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    --csv --page details \
    $T/A/headroom bench ttft --backend cuda --synthetic $m --lengths 2048 --iterations 1 --warmup 1 --decode 12 \
    > "$O/ncu-$m.csv" 2> "$O/ncu-$m.err"
  echo "== $m (rc $?)"
  gzip -f "$O/ncu-$m.csv"
  python3 docs/perf/data/serving-s20/call4/sum.py "$O/ncu-$m.csv.gz"
done > "$O/log.txt" 2>&1
cat "$O/log.txt"
