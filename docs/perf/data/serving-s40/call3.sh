#!/usr/bin/env bash
# Session 40, call 3 (any sm_90a card; ≈ 330 s; carry [".devbin/head", ".devbin/gustage"]: main
# b12afcb+ (with pairs2) and branch gustage (main + the FP8 one-row gate+up asking for all its
# weights at once: tile 0 into registers, tiles 1-2 by cp.async into the thread's own shared-memory
# slots; docs/perf/cuda-decode.md session 40), each packed with headroom-cuda:fp8_backend.
# 1. gustage: the FP8 MoE block against f64 on decode and prefill rows (the staged entry at 1 row).
# 2. ncu, one FP8 decode step after 2,048 tokens: the gate+up kernel's duration, head then gustage
#    (4 launches each, kernels serialised).
# 3. batch-1 FP8 decode after 2,048 tokens (bench ttft --decode 64), head / gustage / head / gustage.
# 4. on an H200, head's FP8 32k TTFT (the bar, with pairs2) while time is left.
# Prediction: gate+up 14.1 -> 12-13 us (H100, one DRAM latency fewer a CTA); FP8 decode +1.5-3 %.
source bench/gpu/call_prelude.sh head gustage
timeout 90 /tmp/gustage/h/fp8_backend --ignored --exact \
  the_moe_block_on_fp8_experts_matches_f64_on_decode_and_prefill_rows --nocapture > "$O/fp8-moe-test.txt" 2>&1
echo "fp8 moe test rc $? (t=$SECONDS)"; grep -E "test result|panicked|rel err" "$O/fp8-moe-test.txt" | head -12
for v in head gustage; do
  HEADROOM_PROFILE_STEP=6 timeout 90 ncu --profile-from-start off -k regex:moe_decode_gate_up --launch-count 4 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv \
    --cache-control none --clock-control none /tmp/$v/h/headroom bench ttft --backend cuda \
    --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 --iterations 1 --warmup 1 --decode 16 \
    > "$O/ncu-gu-$v.csv" 2> "$O/ncu-gu-$v.err"
  echo "ncu $v rc $? (t=$SECONDS)"; grep -E "moe_decode_gate_up" "$O/ncu-gu-$v.csv" | awk -F'","' '{print $5, $(NF-2), $NF}' | cut -c1-120
done
for v in head gustage head gustage; do
  [ $SECONDS -lt 330 ] || break
  timeout 70 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 \
    --iterations 2 --warmup 1 --decode 64 >> "$O/decode-$v.txt" 2>&1
  echo "decode $v rc $? (t=$SECONDS): $(grep -o "decode [0-9.]* tok/s" "$O/decode-$v.txt" | tail -1)"
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ $SECONDS -lt 300 ]; then
  timeout 70 /tmp/head/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 4 --warmup 1 --breakdown-each > "$O/ttft-head.txt" 2>&1
  echo "ttft head rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|    run [0-9]" "$O/ttft-head.txt" | cut -c1-160
fi
