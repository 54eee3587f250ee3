#!/usr/bin/env bash
# Session 20, call 2: A = main 68a2dc9, C = gubal (main 44c4f6e + the MoE
# decode gate_up's routed columns shared evenly among as many CTAs as fill
# every SM twice at one row: 22 shared + 242 routed CTAs at the 35B shape
# instead of 22 + 176, where a third of the SMs held two CTAs and streamed
# twice the bytes of the others). Same arithmetic a column: the same bits
# (greedy ids of both presets and the f64 figures must equal A's).
# Binaries: .devbin/s20c/bins.tar.xz (A/*, C/*).
# Prediction: gate_up alone at one row 17-18 -> 14-15.5 us, the block
# -2-3 us; bf16 decode after 2k / 32k +3-5 %; FP8 +2-4 %; 2-8 rows unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20c; mkdir -p $T && tar -xJf .devbin/s20c/bins.tar.xz -C $T
A=$T/A; C=$T/C
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
LONG=$(python3 -c 'print(" ".join("tokens%d" % (i % 97) for i in range(700)))')
{
echo "=== tests (C), the f64 figures of A and C side by side"
timeout 150 $C/decode_moe --ignored --nocapture --test-threads 1 --skip timing 2>&1 | grep -E "rows: |test result|panicked" | sed "s/^/C /"
timeout 90 $A/decode_moe --ignored --nocapture --test-threads 1 qwen35b_shape the_35b_shape 2>&1 | grep -E "rows: |test result" | sed "s/^/A /"
timeout 150 $C/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked" | sed "s/^/C fp8_backend /"
timeout 150 $C/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/C cuda_fp8 /"
timeout 150 $C/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked" | sed "s/^/C engine /"
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $C/decode_moe --ignored --exact nan_row_stays_in_its_row_and_repeated_calls_agree 2>&1 | grep -E "ERROR SUMMARY"
echo "=== decode_moe timing A C A"
for s in A C A C; do
  timeout 100 $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "moe_decode_timing:" | sed "s/^/$s /"
done
echo "=== greedy ids A C (both presets: must be equal)"
for p in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do for s in A C; do
  timeout 150 $T/$s/headroom generate --backend cuda --synthetic $p --prompt "$LONG" --max-tokens 64 --json "$O/gen-$p-$s.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print(sys.argv[1].split('gen-')[1], 'same tokens' if a==b else 'TOKENS DIFFER from position %d' % n, a[:4])" "$O/gen-$p-A.json" "$O/gen-$p-C.json"
done
echo "=== bench ttft A C A C (bf16, then FP8)"
for p in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do for run in 1 2; do for s in A C; do
  timeout 150 $T/$s/headroom bench ttft --backend cuda --synthetic $p --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$p $s$run /"
done; done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
