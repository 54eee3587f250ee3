#!/usr/bin/env bash
# Session 41, call 5 (any sm_90a card; ≈ 250 s, trimmed to fit the last 455 s of device time
# after a refused start: the ncu step left out; carry [".devbin/head", ".devbin/scalepf"]:
# head = main ca0c1b5 (routeatom merged); scalepf = branch scalepf (main + the FP8 ws GEMMs'
# k-block scales read a step ahead), both packed with headroom-cuda:fp8_grouped).
# Why: call 2's source counters put the promotion's FMUL waiting on the scales' loads at 5.7 %
# of moe_gemm_gate_up_ws_fp8's stall samples and 8.9 % (one line) of down's. Prediction:
# gate+up −2 to −4 %, down −3 to −6 %; 32k TTFT −2 to −4 ms; the same bits (fp8_grouped asserts
# the ws kernels give the tile kernels' bits).
source bench/gpu/call_prelude.sh head scalepf
timeout 150 /tmp/scalepf/h/fp8_grouped --ignored --skip timing > "$O/fp8g-scalepf.txt" 2>&1
echo "scalepf fp8_grouped tests rc $? (t=$SECONDS)"; grep -E "test result|panicked|FAILED" "$O/fp8g-scalepf.txt" | head -5
for v in head scalepf head scalepf; do
  timeout 60 /tmp/$v/h/fp8_grouped --ignored --nocapture timing >> "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $? (t=$SECONDS)"; grep -E "tokens (2048|8192)" "$O/timing-$v.txt" | tail -2 | sed 's/native.*dequant/.../; s/fp8 tiles/tiles/' | cut -c1-150
done
for v in head scalepf head scalepf; do
  timeout 90 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 3 --warmup 1 >> "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS): $(grep -E "tokens  TTFT" "$O/ttft-$v.txt" | tail -1 | cut -c1-60)"
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
    [ $SECONDS -lt 170 ] || break
    timeout 100 /tmp/head/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --iterations 2 \
      --warmup 1 --decode 64 > "$O/bars-$m.txt" 2>&1
    echo "bars $m rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$m.txt" | cut -c1-150
  done
fi
