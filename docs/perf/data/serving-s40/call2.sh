#!/usr/bin/env bash
# Session 40, call 2 (any sm_90a card; ≈ 150 s; carry [".devbin/main"]).
# Where the batch-1 decode's MoE kernels spend their time (docs/perf/cuda-decode.md session 40):
# ncu's speed-of-light, memory, occupancy, launch and warp-state sections for the route, gate+up
# and down kernels of one decode step after 2,048 tokens (HEADROOM_PROFILE_STEP=6 opens the
# window on a decode step; CUDA graphs on, ncu profiles their kernel nodes one by one), 2 layers'
# worth (--launch-count 6), FP8 then bf16. Question: do these kernels wait on DRAM (long
# scoreboard at high DRAM throughput), on their serial phases (the routing before the loads,
# barriers), or on too few bytes in flight (low occupancy, low DRAM throughput)?
source bench/gpu/call_prelude.sh main
B=/tmp/main/h/headroom
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  HEADROOM_PROFILE_STEP=6 timeout 120 ncu --profile-from-start off -k regex:moe_decode --launch-count 6 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --cache-control none --clock-control none \
    -o "$O/ncu-$m" $B bench ttft --backend cuda --synthetic $m --lengths 2048 --iterations 1 --warmup 1 \
    --decode 16 > "$O/ncu-$m.log" 2> "$O/ncu-$m.err"
  ncu -i "$O/ncu-$m.ncu-rep" --page details > "$O/ncu-$m.txt" 2>&1
  ncu -i "$O/ncu-$m.ncu-rep" --page raw --csv > "$O/ncu-$m-raw.csv" 2>&1
  echo "== ncu $m (rc $?, t=$SECONDS)"
  grep -E "moe_decode|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Stall Long|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Active Warps Per" "$O/ncu-$m.txt" | head -80
done
for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
  python3 - "$O/ncu-$m-raw.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 3: sys.exit(print("no raw rows"))
h = rows[0]
want = [i for i, n in enumerate(h) if n in ("Kernel Name", "gpu__time_duration.sum") or "issue_stalled" in n and n.endswith("per_warp_active.pct")]
for r in rows[2:]:
    cells = [(h[i].replace("smsp__average_warps_issue_stalled_", "").replace("smsp__warp_issue_stalled_", ""), r[i]) for i in want]
    top = sorted([c for c in cells if c[0] not in ("Kernel Name", "gpu__time_duration.sum")], key=lambda c: -float(c[1].replace(",", "") or 0))[:6]
    print(r[h.index("Kernel Name")][:40], r[h.index("gpu__time_duration.sum")], top)
PY
done
gzip -f "$O"/ncu-*-raw.csv 2>/dev/null; true
