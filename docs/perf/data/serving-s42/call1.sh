#!/usr/bin/env bash
# Session 42, call 1: the bars after sessions 40-41's merges on whatever card comes.
# On an H200: serving-s41/next/call.sh as prepared (its predictions stand). On an H100 (W1 bf16 and
# W2 do not fit its memory plan): the FP8 bars with the SM clock and power sampled, W1 FP8, and
# serving-s41/next/probes.sh (every cuBLASLt FP8 candidate; the ws GEMMs' tile tails).
# carry [".devbin/head", ".devbin/probes"].
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash docs/perf/data/serving-s41/next/call.sh
fi
source bench/gpu/call_prelude.sh head probes
B=/tmp/head/h/headroom; F=qwen3.6-35b-a3b-fp8
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 20 \
  > "$O/smi-$F.csv" 2>/dev/null & smi=$!
timeout 110 $B bench ttft --backend cuda --synthetic $F --lengths 2048,32768 --iterations 3 --warmup 1 \
  --decode 64 > "$O/bars-$F.txt" 2>&1
echo "bars $F rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$F.txt" | cut -c1-150
kill $smi 2>/dev/null; wait $smi 2>/dev/null
awk -F', ' '{gsub(/ MHz| W/,""); if ($3 > 400) {n++; c+=$2; p+=$3; if (min == "" || $2 < min) min = $2}}
  END {if (n) printf "  under load (power > 400 W): %d samples, SM clock mean %.0f MHz, min %d; power mean %.0f W\n", n, c / n, min, p / n}' "$O/smi-$F.csv"
source docs/perf/data/serving-s31/w1_arm.sh
w1 fp8 $B $F 8971
timeout 200 /tmp/probes/h/fp8_ops --ignored --nocapture --exact \
  lt_algos::timing_every_heuristic_candidate_on_the_dense_prefill_shapes > "$O/ltalgos.txt" 2>&1
echo "ltalgos rc $? (t=$SECONDS)"; grep -E "fp8_lt_algos|test result|panicked" "$O/ltalgos.txt"
timeout 120 /tmp/probes/h/fp8_grouped --ignored --nocapture --exact \
  timing::timing_the_ws_gemms_with_and_without_tile_tails > "$O/tails.txt" 2>&1
echo "tails rc $? (t=$SECONDS)"; grep -E "fp8_grouped_tails|test result|panicked" "$O/tails.txt"
cd "$O" && tar -czf bars.tgz --exclude bars.tgz * && find . -type f ! -name bars.tgz -delete
