#!/usr/bin/env bash
# Session 46, call 4 (≈ 120 s; carry [".devbin/head"] = main b98326f's build): call 2's SASS
# stall profile again, inside the 32k prompt itself. Call 2's window (`--launch-skip 4` from
# the process start) caught the engine's start-up calibration, a 4,096-row prompt (prep grid 64
# chunks, gate+up 250 µs): the GEMMs there stream DRAM (76–82 %), not the compute-bound regime
# of the 32k prompt. Here the window is the timed run's prefill (HEADROOM_PROFILE_STEP=1 after
# one warm-up, as session 41's call 3), layer 1's gate+up and down.
# Prediction (before the run): gate+up ≈ 1.3 ms, down ≈ 0.75 ms (session 41: 1,301.8 / 750.7);
# DRAM ≤ 40 %; issued warps ≤ 0.35 a scheduler; the MMA warps' largest stalls the wgmma wait
# and the full-barrier wait (together ≥ 40 % of the samples), the producer's empty-barrier wait
# ≥ 15 %.
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom
HEADROOM_PROFILE_STEP=1 timeout 300 ncu --profile-from-start off \
  -k regex:"^(moe_gemm_gate_up_ws_fp8|moe_gemm_down_ws_fp8)\$" --launch-skip 2 --launch-count 2 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
  --section SchedulerStats --section MemoryWorkloadAnalysis --cache-control none --clock-control none \
  -o "$O/g32" $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
  --iterations 1 --warmup 1 > "$O/g32.log" 2>&1
echo "ncu rc $? (t=$SECONDS)"; tail -3 "$O/g32.log" | cut -c1-200
ncu -i "$O/g32.ncu-rep" --page details > "$O/details.txt" 2>/dev/null
grep -E "^  [a-z_0-9]+ \(|Duration|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|Issued Warp|Eligible Warps|Achieved Occupancy|Warp Cycles Per Issued" "$O/details.txt" | cut -c1-120
for k in moe_gemm_gate_up_ws_fp8 moe_gemm_down_ws_fp8; do
  ncu -i "$O/g32.ncu-rep" -k "$k" --page source --print-source sass --csv > "$O/src-$k.csv" 2> "$O/src-$k.err"
  echo "$k: $(wc -l < "$O/src-$k.csv") SASS rows"
done
gzip -f "$O"/src-*.csv; rm -f "$O"/g32.ncu-rep
pack_outputs call4
echo "done (t=$SECONDS)"
