#!/usr/bin/env bash
# Session 31, call 1 (H100): where the GDN prep and the full-width scan spend
# their time at W1's shape (8 x 1,024 rows) — the source-level pass
# docs/perf/cuda-gdn.md (session 15) names as the next step for the prep.
#   1. the bench rows on this card: prep alone and each scan at t = 8,192
#      (one sequence and 8 x 1,024) and 32,768;
#   2. ncu of one warm prep launch and one warm full-width scan launch at
#      8 x 1,024: speed of light, occupancy (what limits the CTAs an SM),
#      warp states, scheduler, and the per-SASS-instruction stall samples.
# Binary: .devbin/s31/gdn (cargo test --release -p headroom-cuda --test gdn --no-run).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=.devbin/s31/gdn
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.mem --format=csv,noheader
GDN_BENCH_T=8192,32768 GDN_BENCH_VARIANTS=prep-alone,scan-Narrow,scan-Wide,scan-Full,scan-Wide-8seq,scan-Full-8seq \
  GDN_BENCH_CROSS=8x1024 timeout 150 $B --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture \
  2>&1 | grep -E "gdn_bench|gdn_split|gdn_cross|panicked" | tee "$O/bench.txt"
prof() {  # name, kernel regex, variant
  GDN_BENCH_T=8192 GDN_BENCH_REPS=3 GDN_BENCH_VARIANTS=$3 GDN_BENCH_CROSS= timeout 200 ncu --clock-control none \
    -k "regex:$2" --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section SourceCounters --section MemoryWorkloadAnalysis \
    -o "$O/$1" -f $B --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture > "$O/$1-run.txt" 2>&1
  echo "ncu $1 rc $?"
  ncu --import "$O/$1.ncu-rep" --page details > "$O/$1-details.txt" 2>&1
  ncu --import "$O/$1.ncu-rep" --page source --csv --print-source sass > "$O/$1-sass.csv" 2>&1
  grep -E "Duration|Registers Per|Block Limit|Achieved Occupancy|Theoretical Occupancy|Shared Memory Config|Dynamic Shared|Static Shared|Waves Per SM|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Memory Throughput|DRAM Throughput|L1/TEX Hit|Compute \(SM\)" "$O/$1-details.txt" | head -40
  wc -l "$O/$1-sass.csv"
}
prof prep gdn_chunk_prep prep-alone
prof scanfull gdn_chunk_scan_full scan-Full-8seq
gzip -f "$O"/*-sass.csv
rm -f "$O"/*.ncu-rep
