#!/usr/bin/env bash
# Session 38, call 2 = session 36's prepared tiles.sh with main's build as A (any sm_90a card, ≈ 330 s; carry [".devbin/main",
# ".devbin/fp8tiles"]): branch fp8tiles — the FP8 tile kernels' two code
# changes (the down kernel's k-block index derived, kt = it - tile * kbs;
# store_act as store_act_blocks of one accumulator), which change
# moe_gemm_down_fp8's .text 11,264 -> 11,136 and moe_gemm_gate_up_fp8's
# 25,216 -> 24,704 bytes; every other cubin byte-identical to main's.
# Build: (on fp8tiles) bash bench/gpu/pack_bins.sh .devbin/fp8tiles
# headroom-cuda:fp8_grouped; .devbin/main: main (af1e80f) likewise.
# 1. fp8_grouped on the branch: the f64 checks, the tiles' bits equal to the
#    ws kernels' (unchanged) in every case, the skew test.
# 2. fp8_grouped timing, main then the branch (the tiles run by default below
#    2,048 tokens of top 8, and are timed forced at every size).
# 3. W1 FP8 (its decode steps' passes run the tiles), fresh servers, A B A B.
# Prediction: the same bits; timing and W1 within ±1 % (fewer instructions
# off the tensor cores' critical path; nothing else moves). Merge if no slower.
source bench/gpu/call_prelude.sh main fp8tiles
timeout 200 /tmp/fp8tiles/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "test result|panicked|differ|hang" "$O/fp8_grouped.txt" | head -8
for v in main fp8tiles; do
  timeout 90 /tmp/$v/h/fp8_grouped --ignored --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
    --nocapture > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $?"; grep fp8_grouped_timing "$O/timing-$v.txt" | sed 's/, dequant + bf16.*fp8 tiles/ ... tiles/' | cut -c1-150
done
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
for v in main fp8tiles main fp8tiles; do
  [ $SECONDS -lt 470 ] || break
  w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971
done
rm -f "$O"/w1-*.txt "$O"/serve-*.log
