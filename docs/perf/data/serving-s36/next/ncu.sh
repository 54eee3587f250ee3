#!/usr/bin/env bash
# Prepared in session 36 (any sm_90a card, ≈ 200 s; carry [".devbin/s35main",
# ".devbin/next"]): session 36's call 3 again, narrowed to the gate+up kernel
# (ncu failed to replay moe_gemm_down_ws_fp8 in call 3, "Failed to profile",
# and the call ran out: as in session 17 call 1, kernel replay saves the device
# memory a kernel writes and found none free beside a server holding 90 % of
# the GPU; so the server here takes --memory-fraction 0.6) — the L2 share of main's 128 x 256 gate+up units
# against the 128 x 128 ones (call 3: 81 % of L2's peak, 7.4 TB/s, SM 41 %).
# Prediction: B's L2 throughput 60-70 %, its SM throughput 45-55 %.
source bench/gpu/call_prelude.sh s35main next
for v in s35main next; do
  HEADROOM_PROFILE_STEP=35 timeout 150 ncu --profile-from-start off --clock-control none --cache-control none \
    -k regex:'moe_gemm_gate_up_ws_fp8' --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --metrics lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second --csv --page details \
    --log-file "$O/ncu-$v.csv" --target-processes all \
    /tmp/$v/h/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8931 --warmup off \
    --memory-fraction 0.6 > "$O/serve-$v.log" 2>&1 &
  sp=$!
  for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-$v.log" && break; kill -0 $sp 2>/dev/null || break; sleep 0.5; done
  timeout 50 /tmp/$v/h/headroom bench serve --url http://127.0.0.1:8931 --concurrency 512 --requests 512 \
    --prompt-len 1024 --max-tokens 128 --time-limit-s 15 > /dev/null 2>&1
  pkill -TERM -x headroom; wait $sp; echo "$v rc $? t=$SECONDS"
  grep -E '"(Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput|L2 Hit Rate|lts__t_bytes.sum.per_second)"' \
    "$O/ncu-$v.csv" | awk -F'","' '{print $1"\" "$5" "$(NF-2)" "$NF}' | cut -c1-140
done
gzip -f "$O"/*.csv "$O"/*.log
