#!/usr/bin/env bash
# Planned first GPU call of session 19 (not run): branch s19a = main + fp8xf32 + gemvxf32 (each
# also on its own branch with its own run script, data/serving-s18/{fp8xf32,gemvxf32}/run.sh),
# both "one conversion of x a CTA instead of one per weight" on decode kernels that session 18
# found issue-sensitive (the e4m3 conversion instruction: FP8 decode +3.7 % / +5.5 %):
#   fp8xf32   moe_decode_gate_up and moe_decode_gate_up_fp8 read x as f32 from shared memory (widen_row);
#   gemvxf32  gemv_c1_r1 and fp8_gemv_c1_r1 stage x as f32 in shared memory (stage_x).
# Both keep every product and its order, so the bits: the greedy tokens of both presets must
# equal main's, and the engine's invariance figures must not move.
# Build (on the build machine, release, stripped) into .devbin/s19a/bins.tar.xz:
#   A/headroom from main; B/headroom from s19a and B's test binaries gemv, fp8_ops, decode_moe,
#   fp8_backend (headroom-cuda), cuda_engine, cuda_fp8 (headroom-engine).
# (Built at the end of session 18 from main e04c84b and s19a 286e06a into .devbin/s19a, an
# ignored folder: rebuild if it is gone or either branch moved.)
# Prediction: bf16 decode after 2k +2-4 %, FP8 +3-4 %; TTFT and W1 unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s19a; mkdir -p $T && tar -xJf .devbin/s19a/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B)"
timeout 200 $B/gemv --ignored --test-threads 1 --skip bench --skip timing 2>&1 | grep -E "test result|panicked|FAILED|differs"
timeout 150 $B/fp8_ops --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED|differs"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 150 $B/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 100 $B/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/gemv --ignored --exact small_case_for_memcheck 2>&1 | grep -E "ERROR SUMMARY"
echo "=== greedy ids A vs B"
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  for side in A B; do
    d=$([ $side = A ] && echo $A || echo $B)
    timeout 150 $d/headroom generate --backend cuda --synthetic $m --prompt "the same prompt for both" \
      --max-tokens 64 --json "$O/gen-$m-$side.json" > /dev/null 2>&1
  done
  python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print(sys.argv[1], 'same tokens' if a==b else 'TOKENS DIFFER', a[:6], b[:6])" "$O/gen-$m-A.json" "$O/gen-$m-B.json"
done
echo "=== bench ttft A B A B"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
    timeout 150 $d/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 \
      2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$m $side$run /"
  done
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
