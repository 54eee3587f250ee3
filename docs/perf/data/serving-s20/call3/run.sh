#!/usr/bin/env bash
# Session 20, call 3: A = main 68a2dc9, D = gucp (main 44c4f6e + the bf16
# MoE decode gate_up streaming every other column of a warp through its
# 8 KiB shared-memory stage by cp.async while the column before is
# multiplied: two columns in flight a warp instead of one; 64 KiB of
# dynamic shared memory a CTA). Same products in the same order: the same
# bits (bf16 greedy ids and the f64 figures must equal A's). FP8 entries
# untouched.
# Binaries: .devbin/s20d/bins.tar.xz (A/headroom, A/decode_moe, D/*).
# Prediction (session 19's): gate_up alone at one row 18.6 -> 16.5-17.5
# us; bf16 decode after 2k / 32k +1.5-3 %.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20d; mkdir -p $T && tar -xJf .devbin/s20d/bins.tar.xz -C $T
A=$T/A; D=$T/D
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
LONG=$(python3 -c 'print(" ".join("tokens%d" % (i % 97) for i in range(700)))')
{
echo "=== tests (D), the f64 figures beside A's of call 2"
timeout 150 $D/decode_moe --ignored --nocapture --test-threads 1 --skip timing 2>&1 | grep -E "rows: |test result|panicked" | sed "s/^/D /"
timeout 150 $D/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others_paged 2>&1 | grep -E "worst|test result|panicked" | sed "s/^/D engine /"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $D/decode_moe --ignored --exact nan_row_stays_in_its_row_and_repeated_calls_agree 2>&1 | grep -E "ERROR SUMMARY"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $D/decode_moe --ignored --exact cases::the_35b_shape_matches_f64_for_1_to_8_rows 2>&1 | grep -E "ERROR SUMMARY"
echo "=== decode_moe timing A D A D"
for s in A D A D; do
  timeout 100 $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "moe_decode_timing:" | sed "s/^/$s /"
done
echo "=== greedy ids A D (bf16: must be equal)"
for s in A D; do
  timeout 150 $T/$s/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompt "$LONG" --max-tokens 64 --json "$O/gen-$s.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print('same tokens' if a==b else 'TOKENS DIFFER from position %d' % n, a[:4])" "$O/gen-A.json" "$O/gen-D.json"
echo "=== bench ttft A D A D A D (bf16)"
for run in 1 2 3; do for s in A D; do
  timeout 150 $T/$s/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$s$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
