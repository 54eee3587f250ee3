#!/usr/bin/env bash
# Session 21, call 6: each decoder layer's input norm folded into the one-row
# GEMV it feeds (branch normfold: gemv_norm_c1_r1, each CTA computes the
# quad norm kernel's arithmetic in its order after its wait; the model
# passes the residual stream and the norm to the mixers, which call
# Backend::add_rms_norm_linear_many). Never run before.
# Binaries (.devbin/s21f/bins.tar.xz): m = main 14b4bed's headroom (the
# kernels of main 932329e); nf = normfold (headroom, gemv, cuda_engine).
# Prediction: the same bits as main end to end (logits one token a step
# identical over 1 and 40 layers); bf16 decode +2-3.5 % (41 norm launches
# a step off the chain, ~2 us each in the stream), FP8 unchanged (its
# projections are FP8: no fold).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21f; mkdir -p $T && tar -xJf .devbin/s21f/bins.tar.xz -C $T
A=$T/m; B=$T/nf
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
{
echo "=== gemv (nf)"
timeout 150 $B/gemv --ignored --test-threads 1 --skip timing --skip bench 2>&1 | grep -E "^test |test result|panicked" -A2 | head -30
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/gemv --ignored --exact after_norm::the_input_norm_folded_in_gives_the_two_launches_bits 2>&1 | grep -E "ERROR SUMMARY|test result"
echo "t=$SECONDS"
echo "=== cuda_engine 255 others (nf)"
timeout 100 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked"
echo "t=$SECONDS"
echo "=== logits one token a step, m against nf (1 and 40 layers), and against one chunk"
python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 200000 for i in range(24)]))' > "$O/ids.json"
lg() { timeout 90 $T/$1/headroom --attn-execution fused logits --backend cuda --synthetic qwen3.6-35b-a3b$3 \
  --ids "$O/ids.json" --out "$O/logits-$1-$2$3.safetensors" --chunk $2 2>&1 | tail -n 2 | head -n 1 | cut -c1-50; }
lg m 1 :layers=1; lg nf 1 :layers=1; lg m 24 :layers=1; lg m 1 ""; lg nf 1 ""
for p in "m-1:layers=1 nf-1:layers=1" "m-24:layers=1 nf-1:layers=1" "m-1 nf-1"; do set -- $p
  echo "--- $1 vs $2"; python3 bench/gpu/compare_decode_logits.py "$O/logits-$1.safetensors" "$O/logits-$2.safetensors"
  cmp -s "$O/logits-$1.safetensors" "$O/logits-$2.safetensors" && echo "identical files" || echo "files differ"; done
rm -f "$O"/logits-*.safetensors
echo "t=$SECONDS"
echo "=== bench ttft m nf m nf (bf16), then FP8 m nf"
for run in 1 2; do for s in m nf; do
  timeout 100 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-$s$run.json" 2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$s$run /"
done; done
for s in m nf; do
  timeout 100 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/fp8-$s /"
done
echo "t=$SECONDS"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
