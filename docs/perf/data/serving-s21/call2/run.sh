#!/usr/bin/env bash
# Session 21, call 2: the one-row bf16 GEMV on the tensor cores (gemv_mma_r1:
# a warp 8 outputs, each row's two halves one m16 tile, x's halves in B
# columns 0 / 1), never run before; and the MoE decode of call 1 with its
# gate_up on the tensor cores at one row only (2-8 rows: the FMA _rows
# gate_up beside the tensor-core down, a pairing not run before).
# Binaries (.devbin/s21b/bins.tar.xz): main = ad6104c (headroom, decode_moe,
# gemv); new = the session's tree (headroom, decode_moe, gemv, cuda_engine).
# Prediction: GDN in_proj GEMV at one row 16.6 -> 13.5-14.5 us, out_proj
# 8.3 -> 7-7.5; bf16 decode after 2k +3-5 % over call 1's new (396-398 tok/s).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21b; mkdir -p $T && tar -xJf .devbin/s21b/bins.tar.xz -C $T
A=$T/main; B=$T/new
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
{
echo "=== gemv (new)"
timeout 120 $B/gemv --ignored --test-threads 1 --skip timing --skip bench 2>&1 | grep -E "^test |test result|panicked|rel|diff" | head -30
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/gemv --ignored --exact small_case_for_memcheck 2>&1 | grep -E "ERROR SUMMARY|test result"
echo "t=$SECONDS"
echo "=== decode_moe (new)"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 60 $B/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "moe_decode_timing: rows|panicked" | sed "s/^/new /"
echo "t=$SECONDS"
echo "=== gemv_timing main new"
for s in main new; do
  timeout 90 $T/$s/gemv --ignored --nocapture --test-threads 1 gemv_timing 2>&1 | grep -E "rows 1 |panicked" | sed "s/^/$s /"
done
echo "t=$SECONDS"
echo "=== cuda_engine 255 others (new)"
timeout 100 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked"
echo "=== logits: 24 ids one token a step (decode paths) vs one chunk (prefill paths), 40 layers"
python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 200000 for i in range(24)]))' > "$O/ids.json"
lg() { timeout 90 $T/$1/headroom --attn-execution fused logits --backend cuda --synthetic qwen3.6-35b-a3b \
  --ids "$O/ids.json" --out "$O/logits-$1-$2.safetensors" --chunk $2 2>&1 | tail -n 2 | head -n 1; }
lg main 24; lg main 1; lg new 1
for p in "main-24 main-1" "main-24 new-1" "main-1 new-1"; do set -- $p
  echo "--- $1 vs $2"; python3 bench/gpu/compare_decode_logits.py "$O/logits-$1.safetensors" "$O/logits-$2.safetensors"; done
rm -f "$O"/logits-*.safetensors
echo "t=$SECONDS"
echo "=== bench ttft main new main new (bf16), then FP8 main new"
for run in 1 2; do for s in main new; do
  timeout 100 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-$s$run.json" 2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$s$run /"
done; done
for s in main new; do
  timeout 100 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-fp8-$s.json" 2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/fp8-$s /"
done
echo "t=$SECONDS"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
