#!/usr/bin/env bash
# Session 42, call 2 (any sm_90a card; ≈ 450-550 s; carry [".devbin/head", ".devbin/actq"]):
# head = main (code ae32bcf) packed with headroom-cuda:fp8_grouped (main's kernels: the
# routed-experts baseline; the probes bundle was lost with the build machine's restart);
# actq = branch actq (the warp-specialised FP8 gate+up writes act's e4m3 codes and scales
# itself, no quantization kernel between the routed GEMMs), packed with
# headroom-cuda:fp8_grouped and headroom-cuda:fp8_backend.
# Why: act's quantization is 160 us a layer at 32k (call 3 of session 41) and act's bf16 bytes
# are written and read back once more; the ws gate+up's unit holds a row's whole 128-column
# scale block, so its epilogue can write the codes (session 33's fused attempts lost on the
# older 64-column CTAs, which had to trade amaxes). Prediction: the same bits (skew test: ws vs
# tiles bitwise; fp8_backend vs f64); routed experts at 8,192 tokens −1 to −4 % (session 33 put
# act's quantization at ≈ 28 us a layer at 8k on the H100; the epilogue adds 64 IEEE divisions a
# thread a unit, ≈ 1 us a unit by issue count); FP8 32k TTFT −0.3 to −0.8 %; W1 FP8 +0 to +1 %.
source bench/gpu/call_prelude.sh head actq
timeout 150 /tmp/actq/h/fp8_grouped --ignored --skip timing > "$O/fp8g-actq.txt" 2>&1
echo "actq fp8_grouped tests rc $? (t=$SECONDS)"; grep -E "test result|panicked|FAILED" "$O/fp8g-actq.txt" | head -5
timeout 120 /tmp/actq/h/fp8_backend --ignored > "$O/fp8b-actq.txt" 2>&1
echo "actq fp8_backend tests rc $? (t=$SECONDS)"; grep -E "test result|panicked|FAILED" "$O/fp8b-actq.txt" | head -5
for v in head actq head actq; do
  timeout 60 /tmp/$v/h/fp8_grouped --ignored --nocapture --exact timing::timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms \
    >> "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $? (t=$SECONDS)"; grep -E "fp8_grouped_timing" "$O/timing-$v.txt" | tail -4 | cut -c1-160
done
F=qwen3.6-35b-a3b-fp8
for v in head actq head actq; do
  timeout 90 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic $F --lengths 8192,32768 \
    --iterations 3 --warmup 1 >> "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS): $(grep -E "tokens  TTFT" "$O/ttft-$v.txt" | tail -2 | cut -c1-60 | tr '\n' ' ')"
done
source docs/perf/data/serving-s31/w1_arm.sh
if [ $SECONDS -lt 300 ]; then w1 head /tmp/head/h/headroom $F 8971; fi
if [ $SECONDS -lt 420 ]; then w1 actq /tmp/actq/h/headroom $F 8972; fi
cd "$O" && tar -czf call2.tgz --exclude call2.tgz * && find . -type f ! -name call2.tgz -delete
