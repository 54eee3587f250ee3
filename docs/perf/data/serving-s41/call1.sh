#!/usr/bin/env bash
# Prepared in session 40 for the next session (any sm_90a card, ≈ 400 s; carry [".devbin/head",
# ".devbin/pingpong", ".devbin/rankpar"]: main, main + next/pingpong.patch and main +
# next/rankpar.patch, packed by bench/gpu/pack_bins.sh DIR with the test binaries next/README
# names, each branch in its own CARGO_TARGET_DIR).
# 0. head's paged attention tests (session 40 rebuilt the paged kernels' launch parameters after
#    its last call: LaunchArgs, 34e2254; one launch path, bf47bb4) — the pairs and heads kernels' bits, splits, NaN.
# 1. pingpong (the pairs kernel's MMA warpgroups taking turns at their GEMMs): its tests (the
#    heads kernel's bits; a hang shows as the timeout), then FP8 32k TTFT, head then pingpong,
#    each run's parts (compare the attention's share, not run times). On an H200 head's arm is
#    the TTFT bar with pairs2.
# 2. rankpar (the decode routing's candidates ranked in parallel): the routing tests
#    (decode_moe: ties, a NaN router row, back-to-back calls, tails; fp8_backend's MoE block),
#    moe_decode_timing head then rankpar, FP8 decode after 2k head / rankpar / head / rankpar.
# 3. On an H200, W1 FP8 on head while time is left.
# Predictions (docs/perf/cuda-attention.md and cuda-decode.md, session 40): pingpong attention
# −2 to −6 %; rankpar gate+up up to −1 µs of 14–15 (H100), decode +0.5–2 %; the same outputs.
source bench/gpu/call_prelude.sh head pingpong rankpar
timeout 150 /tmp/head/h/paged_attention --ignored --test-threads 1 > "$O/paged-tests-head.txt" 2>&1
echo "head paged_attention tests rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/paged-tests-head.txt" | head -4
timeout 60 /tmp/pingpong/h/paged_attention --ignored --test-threads 1 pairs:: > "$O/pairs-pingpong.txt" 2>&1
echo "pingpong pairs tests rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/pairs-pingpong.txt" | head -4
for v in head pingpong; do
  timeout 90 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 4 --warmup 1 --breakdown-each > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|    run [0-9]" "$O/ttft-$v.txt" | cut -c1-120
done
timeout 150 /tmp/rankpar/h/decode_moe --ignored --skip timing > "$O/decode-moe-tests.txt" 2>&1
echo "rankpar decode_moe tests rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/decode-moe-tests.txt" | head -4
timeout 60 /tmp/rankpar/h/fp8_backend --ignored --exact \
  the_moe_block_on_fp8_experts_matches_f64_on_decode_and_prefill_rows > "$O/fp8-moe-test.txt" 2>&1
echo "rankpar fp8 moe test rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/fp8-moe-test.txt" | head -4
for v in head rankpar; do
  timeout 60 /tmp/$v/h/decode_moe --ignored --exact timing::moe_decode_timing --nocapture > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $? (t=$SECONDS)"; grep -E "rows 1 " "$O/timing-$v.txt" | cut -c1-150
done
for v in head rankpar head rankpar; do
  [ $SECONDS -lt 360 ] || break
  timeout 70 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 \
    --iterations 2 --warmup 1 --decode 64 >> "$O/decode-$v.txt" 2>&1
  echo "decode $v rc $? (t=$SECONDS): $(grep -o "decode [0-9.]* tok/s" "$O/decode-$v.txt" | tail -1)"
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ $SECONDS -lt 420 ]; then
  source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
  w1 fp8-head /tmp/head/h/headroom qwen3.6-35b-a3b-fp8 8971
  cd "$O" && tar -czf w1.tgz w1-*.json serve-*.log 2>/dev/null; rm -f "$O"/w1-*.txt "$O"/w1-*.json "$O"/serve-*.log
fi
