#!/usr/bin/env bash
# Session 44, call 3 (≈ 120 s; carry [".devbin/gdn"] = main packed by
# `bash bench/gpu/pack_bins.sh .devbin/gdn headroom-cuda:gdn_decode_timing`):
# the fused GDN decode step (gdn_decode.cu), 40–48 % of W1's decode-only step
# (call 2: 30 × 576 µs at 512 sequences, 3.73 TB/s, against 3.97 TB/s for
# gdn_recurrent_step in the mixed step and ≈ 4.3 TB/s for a device copy) —
# what holds it: its timing at 1–512 sequences, then one 512-sequence launch
# under ncu's SpeedOfLight, Occupancy, WarpStateStats, MemoryWorkloadAnalysis
# and LaunchStats sections.
# Prediction (written before the run): 512 sequences 550–590 µs a launch
# (stream), 3.6–3.9 TB/s; ncu: DRAM throughput 75–87 % of peak, achieved
# occupancy ≤ 50 % (two 512-thread CTAs an SM, the registers), the largest
# stall long scoreboard (the state's loads).
# All outputs go into one archive (a call returns at most 8 files).
source bench/gpu/call_prelude.sh gdn
T=/tmp/gdn/h/gdn_decode_timing
(cd "$O" && timeout 120 $T --ignored --nocapture > "$O/timing.txt" 2>&1); echo "timing rc $? (t=$SECONDS)"
grep -E "^gdn_decode_timing:" "$O/timing.txt" | cut -c1-150
# Launches per sequence count: 3 warm-up + 30 single + 200 stream; 512 is the 8th count.
timeout 150 ncu --kernel-name gdn_decode_step_bf16 --launch-skip $((7 * 233 + 3)) --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section LaunchStats --section SchedulerStats \
  $T --ignored --nocapture > "$O/ncu512.txt" 2>&1; echo "ncu rc $? (t=$SECONDS)"
grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|Mem Busy|Max Bandwidth|L2 Hit" "$O/ncu512.txt" | cut -c1-140 | head -40
pack_outputs call3
echo "done (t=$SECONDS)"
