#!/usr/bin/env bash
# Prepared in session 40 for the next session (any sm_90a card, ≈ 330 s; carry [".devbin/head",
# ".devbin/rankpar"]: main and main + next/rankpar.patch, each packed by
# bench/gpu/pack_bins.sh DIR headroom-cuda:decode_moe headroom-cuda:fp8_backend (head also with
# headroom-cuda:paged_attention), each branch in its own CARGO_TARGET_DIR — next/README says how).
# 0. head's paged attention tests (session 40 rebuilt the paged kernels' parameters after its
#    last call: LaunchArgs, 34e2254) — the pairs and heads kernels' bits, splits, NaN.
# 1. rankpar's routing against f64 and the grouped path (decode_moe: ties to the lower expert,
#    a NaN router row, back-to-back calls, the fixtures' blocks, tails; fp8_backend's MoE block).
# 2. moe_decode_timing (the bf16 35B shape, each kernel's median and the chained block), head
#    then rankpar.
# 3. batch-1 FP8 decode after 2,048 tokens, head / rankpar / head / rankpar.
# 4. On an H200, the bars with pairs2 (merged in session 40, measured on the H100 only): FP8 32k
#    TTFT and W1 FP8, head, while time is left.
# Prediction (docs/perf/cuda-decode.md session 40): gate+up up to −1 µs of 14–15 (H100), decode
# +0.5–2 %; the same outputs.
source bench/gpu/call_prelude.sh head rankpar
timeout 120 /tmp/head/h/paged_attention --ignored --test-threads 1 > "$O/paged-tests.txt" 2>&1
echo "paged_attention tests rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/paged-tests.txt" | head -6
timeout 150 /tmp/rankpar/h/decode_moe --ignored --skip timing > "$O/decode-moe-tests.txt" 2>&1
echo "decode_moe tests rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/decode-moe-tests.txt" | head -6
timeout 60 /tmp/rankpar/h/fp8_backend --ignored --exact \
  the_moe_block_on_fp8_experts_matches_f64_on_decode_and_prefill_rows > "$O/fp8-moe-test.txt" 2>&1
echo "fp8 moe test rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/fp8-moe-test.txt" | head -4
for v in head rankpar; do
  timeout 60 /tmp/$v/h/decode_moe --ignored --exact timing::moe_decode_timing --nocapture > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $? (t=$SECONDS)"; grep -E "rows 1 " "$O/timing-$v.txt" | cut -c1-150
done
for v in head rankpar head rankpar; do
  [ $SECONDS -lt 250 ] || break
  timeout 70 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 \
    --iterations 2 --warmup 1 --decode 64 >> "$O/decode-$v.txt" 2>&1
  echo "decode $v rc $? (t=$SECONDS): $(grep -o "decode [0-9.]* tok/s" "$O/decode-$v.txt" | tail -1)"
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 80 /tmp/head/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 4 --warmup 1 --breakdown-each > "$O/ttft-head.txt" 2>&1
  echo "ttft head rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|    run [0-9]" "$O/ttft-head.txt" | cut -c1-160
  source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
  [ $SECONDS -lt 420 ] && w1 fp8-head /tmp/head/h/headroom qwen3.6-35b-a3b-fp8 8971
  cd "$O" && tar -czf w1.tgz w1-*.json serve-*.log 2>/dev/null; rm -f "$O"/w1-*.txt "$O"/w1-*.json "$O"/serve-*.log
fi
