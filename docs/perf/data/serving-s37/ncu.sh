#!/usr/bin/env bash
# Session 37 (any sm_90a card, ≈ 200 s; carry [".devbin/grow"]): the wide FP8
# ws units (128 x 256, merged in session 36) under ncu in W1's mixed step —
# session 36's prepared serving-s36/next/ncu.sh without its narrow arm (that
# binary went with the last checkout), with the down kernel too: the server at
# --memory-fraction 0.6 leaves ncu's replay its device memory (session 36 call
# 3 lost the down kernel to "Failed to profile" beside a server at 0.9).
# Compare with session 36 call 3 (H100, narrow 128 x 128 gate+up: L2 81 % of
# peak, SM 41 %). Prediction: wide gate+up L2 60-70 %, SM 45-55 %; down
# (4 k-steps a unit) lower SM, its epilogue visible as the gap.
source bench/gpu/call_prelude.sh grow
B=/tmp/grow/h/headroom
HEADROOM_PROFILE_STEP=35 timeout 200 ncu --profile-from-start off --clock-control none --cache-control none \
  -k regex:'moe_gemm_(gate_up|down)_ws_fp8' --launch-count 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --metrics lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
  --csv --page details --log-file "$O/ncu-wide.csv" --target-processes all \
  $B serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8931 --warmup off \
  --memory-fraction 0.6 > "$O/serve-ncu.log" 2>&1 &
sp=$!
for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-ncu.log" && break; kill -0 $sp 2>/dev/null || break; sleep 0.5; done
timeout 60 $B bench serve --url http://127.0.0.1:8931 --concurrency 512 --requests 512 \
  --prompt-len 1024 --max-tokens 128 --time-limit-s 20 > /dev/null 2>&1
pkill -TERM -x headroom; wait $sp; echo "rc $? t=$SECONDS"
grep -E '"(Kernel Name|Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|L2 Hit Rate|Memory Throughput|Achieved Occupancy|Warp Cycles Per Issued Instruction|lts__t_bytes.sum.per_second|sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active)"' \
  "$O/ncu-wide.csv" | awk -F'","' '{print $5" | "$(NF-2)" "$NF}' | cut -c1-150 | head -80
gzip -f "$O"/*.csv "$O"/*.log
