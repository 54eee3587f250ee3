#!/usr/bin/env bash
# Planned first GPU call of session 20 (not run): branch gucp = main 1208c03 +
# the bf16 MoE decode gate_up streaming two columns a warp (even columns in
# registers as before, odd ones through a per-warp 8 KiB shared stage filled by
# cp.async with the same L2 evict-first policy; 64 KiB of dynamic shared memory
# a CTA, taken where one pass covers hidden, i.e. hidden <= 2048: the 35B
# shape). Why: call 3 of session 19 fits gate_up as rounds of one column a
# warp, each ≈ 1 µs of bubble beside its bytes (3 columns 18.4 µs, 4: 20.1, 5:
# 20.9); with two columns in flight a warp the second round's bubble hides
# behind the first. Same sums in the same order (the bits: greedy ids and the
# decode_moe figures must equal main's); FP8 entries byte-identical.
# Binaries in .devbin/s20a/bins.tar.xz (built at the end of session 19 from
# main 1208c03 and gucp 8c1b38e; rebuild if either moved): A/headroom,
# A/decode_moe; B/headroom, B/decode_moe, B/cuda_engine.
# Prediction: gate_up alone at one row 18.4 -> 16.5-17.5 µs, the block
# 27.0 -> 25.5-26.5; bf16 decode after 2k / 32k +1.5-3 %; FP8 and TTFT unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20a; mkdir -p $T && tar -xJf .devbin/s20a/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B), and the f64 figures of A and B side by side (equal figures: equal outputs)"
for side in A B; do
  timeout 150 $T/$side/decode_moe --ignored --nocapture --test-threads 1 --skip timing 2>&1 \
    | grep -E "rows: |test result|panicked" | sed "s/^/$side /"
done
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/decode_moe --ignored --exact nan_row_stays_in_its_row_and_repeated_calls_agree 2>&1 | grep -E "ERROR SUMMARY|test result"
echo "=== decode_moe timing A B"
for side in A B; do
  timeout 100 $T/$side/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "gate_up median|chained" | sed "s/^/$side /"
done
echo "=== greedy ids A vs B"
for side in A B; do
  timeout 150 $T/$side/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompt "the same prompt for both" \
    --max-tokens 64 --json "$O/gen-$side.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print('same tokens' if a==b else 'TOKENS DIFFER', a[:6], b[:6])" "$O/gen-A.json" "$O/gen-B.json"
echo "=== bench ttft A B A B (bf16)"
for run in 1 2; do for side in A B; do
  timeout 150 $T/$side/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$side$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
