#!/usr/bin/env bash
# Session 18, call 6: one batch-1 decode step after 2,048 tokens, kernel by kernel (ncu, one
# metric: gpu__time_duration, kernels serialised, caches and clocks as the run leaves them), on
# main bb087d8 (session 17's fold of the norm into the router, attnpdl, normrow, fp8cvt), for the
# bf16 and the FP8 presets: the table session 12 took before those changes. HEADROOM_PROFILE_STEP=6
# opens the profiler's window on the 7th engine step (a decode step; crates/cuda/src/profile_window.rs).
# Binary: .devbin/s18c6/bins.tar.xz (headroom, release). Summed by data/serving-s17/call1/sum.py.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c6; mkdir -p $T && tar -xJf .devbin/s18c6/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  HEADROOM_PROFILE_STEP=6 timeout 200 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
    --cache-control none --clock-control none \
    $T/headroom bench ttft --backend cuda --synthetic $m --lengths 2048 --iterations 1 --warmup 1 --decode 16 \
    > "$O/ncu-$m.csv" 2> "$O/ncu-$m.err"
  echo "== $m (rc $?)"
  python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$m.csv" | head -40
done > "$O/log.txt" 2>&1
cd "$O" && gzip -f ncu-*.csv
cat "$O/log.txt"
