#!/usr/bin/env bash
# Session 20, call 5: A = main 68a2dc9, E = fp8down (main 6a1cea8 + the
# MoE decode's FP8 down kernel on the tensor cores: a CTA 16 output
# columns, a warp a slot's 16 x inter tile on mma.sync m16n8k16, e4m3 -> f16
# A, the slot's activations as f16 B times a power of two; taken for FP8
# routed and shared experts of whole 64-column rounds up to 512). Call 4's
# ncu: the FMA FP8 down runs 254 warp instructions a KB at 14 % of DRAM,
# stalled on shared memory as much as on loads.
# Not the same bits (another summation order, f16 activations): FP8 tokens
# compared, not required; bf16 untouched (its SASS pinned by a CPU test).
# Binaries: .devbin/s20f/bins.tar.xz (A/*, E/*).
# Prediction: FP8 down alone at one row 14 -> 6-9 us, FP8 block -3-5 us,
# FP8 decode after 2k / 32k +4-8 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20f; mkdir -p $T && tar -xJf .devbin/s20f/bins.tar.xz -C $T
A=$T/A; E=$T/E
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
LONG=$(python3 -c 'print(" ".join("tokens%d" % (i % 97) for i in range(700)))')
{
echo "=== tests (E)"
timeout 240 $E/fp8_backend --ignored --nocapture --test-threads 1 --skip timing 2>&1 | grep -E "^test |fp8_moe: case|35B|test result|panicked" | sed "s/^/E /"
timeout 150 $E/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/E cuda_fp8 /"
timeout 150 $E/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked" | sed "s/^/E decode_moe /"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $E/fp8_backend --ignored --exact fused::the_fused_fp8_decode_matches_f64_at_1_to_8_rows 2>&1 | grep -E "ERROR SUMMARY"
echo "=== fp8_moe_timing A E"
for s in A E; do
  timeout 150 $T/$s/fp8_backend --ignored --nocapture --test-threads 1 fp8_moe_timing 2>&1 | grep -E "fp8_moe_timing: rows (1|2|4|8):" | sed "s/^/$s /"
done
echo "=== greedy ids A E (FP8: compared)"
for s in A E; do
  timeout 150 $T/$s/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --prompt "$LONG" --max-tokens 64 --json "$O/gen-$s.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print('same tokens' if a==b else 'tokens differ from position %d' % n, a[:6], b[:6])" "$O/gen-A.json" "$O/gen-E.json"
echo "=== bench ttft A E A E A E (FP8)"
for run in 1 2 3; do for s in A E; do
  timeout 150 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$s$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
