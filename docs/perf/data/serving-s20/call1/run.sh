#!/usr/bin/env bash
# Session 20, call 1: A = main 68a2dc9, B = s20 (main + kvearly 61022e3 +
# fp8mma 8fdded2). Both branches were rewritten this session from session
# 19's notes (its branches were lost with its machine).
#  kvearly: a paged-attention CTA whose first key tile is history only loads
#    its K and V before griddepcontrol.wait. Same bits (bf16 tokens and the
#    engine's invariance figures must equal A's).
#  fp8mma: one-row wide FP8 GEMV launches on mma.sync (fp8_gemv_mma_r1).
#    Not the same bits as the FMA kernel: FP8 tokens compared, not required.
# Binaries: .devbin/s20/bins.tar.xz (A/*, B/*).
# Prediction: bf16 decode after 2k / 32k +0.5-1 % (kvearly); the 12288 x
# 2048 FP8 GEMV 9.3 -> 6.5-7.5 us; FP8 decode +4-7 %; TTFT unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20; mkdir -p $T && tar -xJf .devbin/s20/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
LONG=$(python3 -c 'print(" ".join("tokens%d" % (i % 97) for i in range(700)))')
{
echo "=== tests (B)"
timeout 150 $B/paged_attention --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/paged /"
timeout 150 $B/attention_split --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/split /"
timeout 150 $B/fused_decode --ignored --test-threads 1 attention_prep 2>&1 | grep -E "^test |test result|panicked" | sed "s/^/prep /"
timeout 200 $B/fp8_ops --ignored --test-threads 1 --skip timing 2>&1 | grep -E "^test |test result|panicked" | sed "s/^/fp8_ops /"
timeout 150 $B/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked" | sed "s/^/fp8_backend /"
timeout 150 $B/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked" | sed "s/^/cuda_fp8 /"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked" | sed "s/^/engine /"
echo "=== memcheck (B)"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/paged_attention --ignored --exact forced_splits_and_the_gate_match_f64 2>&1 | grep -E "ERROR SUMMARY"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/fp8_ops --ignored --exact mma::a_nan_or_inf_input_makes_every_output_nan_or_inf_on_the_tensor_cores 2>&1 | grep -E "ERROR SUMMARY"
echo "=== FP8 GEMV timing A B"
for s in A B; do
  timeout 100 $T/$s/fp8_ops --ignored --nocapture --test-threads 1 timing_fp8_gemv_vs_bf16_gemv_at_one_row 2>&1 | grep -E "fp8_timing" | sed "s/^/$s /"
done
echo "=== greedy ids A B (bf16: must be equal; FP8: compared)"
for p in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do for s in A B; do
  timeout 150 $T/$s/headroom generate --backend cuda --synthetic $p --prompt "$LONG" --max-tokens 64 --json "$O/gen-$p-$s.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); n=next((i for i,(x,y) in enumerate(zip(a,b)) if x!=y), len(a)); print(sys.argv[1].split('gen-')[1], 'same tokens' if a==b else 'tokens differ from position %d' % n, a[:4])" "$O/gen-$p-A.json" "$O/gen-$p-B.json"
done
echo "=== bench ttft A B A B (bf16, then FP8)"
for p in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do for run in 1 2; do for s in A B; do
  timeout 150 $T/$s/headroom bench ttft --backend cuda --synthetic $p --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$p $s$run /"
done; done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
