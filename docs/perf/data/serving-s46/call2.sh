#!/usr/bin/env bash
# Session 46, call 2 (≈ 150 s; carry [".devbin/head"] = main b98326f's kernels packed with
# `bench/gpu/pack_bins.sh .devbin/head headroom-hardware:lib`): where a 32k FP8 prompt's
# compute-bound kernels stall, by SASS line — the routed ws GEMMs (session 41 took them at 8k,
# where they stream DRAM; at 32k they run at ≈ 846 / 733 TFLOP/s, ≈ 43 % / 37 % of the H100's
# dense FP8 rate) and the GDN rule's prep and narrow scan (1 × 32k: 128 scan CTAs, one an SM).
# One ncu run of `bench ttft --lengths 32768`: layer 1's four kernels (launch order per GDN
# layer + MoE: prep, scan, gate+up, down), SourceCounters + WarpStateStats + SpeedOfLight +
# Occupancy + SchedulerStats + LaunchStats.
# Prediction (written before the run): gate+up / down — the MMA warps' largest stall the
# wgmma wait (WARPGROUP.DEPBAR / ARRIVES) 25–40 %, the full-barrier wait 10–20 %, tensor pipe
# 40–50 % active; scan — one CTA an SM, < 1 eligible warp a scheduler, the largest stall a
# barrier or the ldmatrix / mma dependency chain, issue-active ≤ 35 %.
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom
timeout 400 ncu -k regex:"^(moe_gemm_gate_up_ws_fp8|moe_gemm_down_ws_fp8|gdn_chunk_scan_narrow_bf16|gdn_chunk_prep_bf16)\$" \
  --launch-skip 4 --launch-count 4 \
  --section SourceCounters --section WarpStateStats --section SpeedOfLight --section Occupancy \
  --section SchedulerStats --section LaunchStats --cache-control none --clock-control none \
  -o "$O/k32" $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
  --iterations 1 --warmup 0 > "$O/k32.log" 2>&1
echo "ncu rc $? (t=$SECONDS)"; tail -3 "$O/k32.log" | cut -c1-200
ncu -i "$O/k32.ncu-rep" --page details --csv > "$O/details.csv" 2>/dev/null
ncu -i "$O/k32.ncu-rep" --page details > "$O/details.txt" 2>/dev/null
grep -E "^  [a-z_0-9]+ \(|Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Warp|Eligible Warps|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$O/details.txt" | cut -c1-120
for k in moe_gemm_gate_up_ws_fp8 moe_gemm_down_ws_fp8 gdn_chunk_scan_narrow_bf16 gdn_chunk_prep_bf16; do
  ncu -i "$O/k32.ncu-rep" -k "$k" --page source --print-source sass --csv > "$O/src-$k.csv" 2> "$O/src-$k.err"
  echo "$k: $(wc -l < "$O/src-$k.csv") SASS rows"
done
gzip -f "$O"/src-*.csv "$O"/details.csv; rm -f "$O"/k32.ncu-rep
pack_outputs call2
echo "done (t=$SECONDS)"
