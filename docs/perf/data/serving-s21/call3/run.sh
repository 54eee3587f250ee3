#!/usr/bin/env bash
# Session 21, call 3: the tensor-core gate_up kernels (bf16 at one row, FP8 at
# every row count) ask L2 for all of a CTA's gate and up rows at once (bulk
# prefetches of 16 KiB, evict-first) as soon as the CTA knows its expert,
# instead of one register stage a warp at a time. Never run before.
# Binaries (.devbin/s21c/bins.tar.xz): m14 = main 14b4bed (call 1's kernels,
# gate_up on the tensor cores at one row); pf = m14 + the prefetch; main =
# ad6104c's headroom (before this session), for the logits check.
# Prediction: bf16 gate_up at one row 17.0 -> 13-14 us, FP8's 12-13 -> 10-11;
# decode +3-5 % (bf16 and FP8).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21c; mkdir -p $T && tar -xJf .devbin/s21c/bins.tar.xz -C $T
A=$T/m14; B=$T/pf
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
{
echo "=== tests (pf)"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 120 $B/fp8_backend --ignored --nocapture --test-threads 1 the_moe_block the_fused_fp8 2>&1 | grep -E "fp8_moe: case . rows [1258]:|35B|test result|panicked" | head -20
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/decode_moe --ignored --exact tensor_core_shapes_with_tails_match_f64 2>&1 | grep -E "ERROR SUMMARY"
echo "t=$SECONDS"
echo "=== block timing m14 pf"
for s in m14 pf; do
  timeout 60 $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "moe_decode_timing: rows|panicked" | sed "s/^/$s /"
  timeout 60 $T/$s/fp8_backend --ignored --nocapture --test-threads 1 fp8_moe_timing 2>&1 | grep -E "fp8_moe_timing: rows|panicked" | sed "s/^/$s /"
done
echo "t=$SECONDS"
echo "=== logits, 1 layer: 24 ids one token a step (decode kernels) vs one chunk (prefill paths)"
python3 -c 'import json; print(json.dumps([(i * 7919 + 13) % 200000 for i in range(24)]))' > "$O/ids.json"
lg() { timeout 90 $T/$1/headroom --attn-execution fused logits --backend cuda --synthetic qwen3.6-35b-a3b:layers=1 \
  --ids "$O/ids.json" --out "$O/logits-$1-$2.safetensors" --chunk $2 2>&1 | tail -n 2 | head -n 1 | cut -c1-60; }
lg main 24; lg main 1; lg m14 1; lg pf 1
for p in "main-24 main-1" "main-24 m14-1" "main-24 pf-1" "main-1 m14-1"; do set -- $p
  echo "--- $1 vs $2"; python3 bench/gpu/compare_decode_logits.py "$O/logits-$1.safetensors" "$O/logits-$2.safetensors"; done
rm -f "$O"/logits-*.safetensors
echo "t=$SECONDS"
echo "=== bench ttft m14 pf m14 pf, bf16 then FP8"
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do for run in 1 2; do for s in m14 pf; do
  timeout 100 $T/$s/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-$m-$s$run.json" 2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$m $s$run /"
done; done; done
echo "t=$SECONDS"
echo "=== ncu: the bf16 gate_up at one row (pf, then m14)"
for s in pf m14; do
timeout 120 ncu --kernel-name regex:moe_decode_gate_up_mma --launch-skip 5 --launch-count 1 --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
  $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing > "$O/ncu-$s.txt" 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput|Issued Warp|No Eligible|Stall|L2 Hit|Warp Cycles Per Issued" "$O/ncu-$s.txt" | head -30 | sed "s/^/$s /"
done
echo "t=$SECONDS"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
