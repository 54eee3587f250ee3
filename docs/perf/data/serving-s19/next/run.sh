#!/usr/bin/env bash
# Planned first GPU call of session 20 (not run). Two branches of session 19
# against main (A), each compiled and NVRTC-checked (no spills), never run:
#  B = gucp: the bf16 MoE decode gate_up streams two columns a warp (even
#      columns in registers as before, odd ones through a per-warp 8 KiB shared
#      stage filled by cp.async with the same L2 evict-first policy; 64 KiB of
#      dynamic shared memory a CTA where one pass covers hidden, i.e. hidden <=
#      2048: the 35B shape). Why: session 19's call 3 fits gate_up as rounds of
#      one column a warp, each ~1 us of bubble beside its bytes (3 columns 18.4
#      us, 4: 20.1, 5: 20.9). FP8 entries byte-identical.
#  C = kvearly: a paged-attention CTA whose first key tile is history only
#      loads that tile's K and V before its griddepcontrol.wait (the decode
#      split CTAs but the last one; prefill chunks' history tiles too), so two
#      DRAM trips overlap the prep kernel. Prefill (contiguous) kernels' SASS
#      unchanged.
# Both keep every sum and its order: the same bits (greedy ids, the printed
# f64 figures, the engine's invariance figures must equal A's).
# Binaries in .devbin/s20a/bins.tar.xz (built at the end of session 19: A from
# main 1208c03, B from gucp 8c1b38e, C from kvearly 748c1dc; main's later
# commits change docs and a comment only; rebuild if a branch moved): A/headroom, A/decode_moe; B/headroom, B/decode_moe,
# B/cuda_engine; C/headroom, C/paged_attention, C/attention_split, C/cuda_engine.
# Prediction: B: gate_up alone at one row 18.4 -> 16.5-17.5 us, the block
# 27.0 -> 25.5-26.5, bf16 decode after 2k / 32k +1.5-3 %. C: decode +0.5-1 %
# (about 2 us an attention layer); TTFT unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20a; mkdir -p $T && tar -xJf .devbin/s20a/bins.tar.xz -C $T
A=$T/A; B=$T/B; C=$T/C
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
LONG=$(python3 -c 'print(" ".join("tokens%d" % (i % 97) for i in range(700)))')
{
echo "=== tests (B: decode_moe; C: paged attention), the f64 figures of A and B side by side"
timeout 120 $B/decode_moe --ignored --nocapture --test-threads 1 --skip timing 2>&1 | grep -E "rows: |test result|panicked" | sed "s/^/B /"
timeout 60 $A/decode_moe --ignored --nocapture --test-threads 1 qwen35b_shape the_35b_shape 2>&1 | grep -E "rows: |test result" | sed "s/^/A /"
timeout 150 $C/paged_attention --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/C /"
timeout 150 $C/attention_split --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/C /"
for side in B C; do
  d=$([ $side = B ] && echo $B || echo $C)
  timeout 100 $d/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result" | sed "s/^/$side /"
done
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/decode_moe --ignored --exact nan_row_stays_in_its_row_and_repeated_calls_agree 2>&1 | grep -E "ERROR SUMMARY"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $C/paged_attention --ignored --exact forced_splits_and_the_gate_match_f64 2>&1 | grep -E "ERROR SUMMARY"
echo "=== decode_moe timing A B"
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 100 $d/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "gate_up median|chained" | sed "s/^/$side /"
done
echo "=== greedy ids A B C (a ~1,400-token prompt, 64 tokens)"
for side in A B C; do
  d=$T/$side
  timeout 150 $d/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompt "$LONG" \
    --max-tokens 64 --json "$O/gen-$side.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b,c=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print('B', 'same tokens' if a==b else 'TOKENS DIFFER', 'C', 'same tokens' if a==c else 'TOKENS DIFFER', a[:4])" "$O/gen-A.json" "$O/gen-B.json" "$O/gen-C.json"
echo "=== bench ttft A B C A B C (bf16)"
for run in 1 2; do for side in A B C; do
  timeout 150 $T/$side/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$side$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
