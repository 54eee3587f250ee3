#!/usr/bin/env bash
# Session 19, call 2: branch downearly (the MoE decode's down kernel loads its
# routed rows before its griddepcontrol.wait, once gate_up's CTA has published
# the row's experts) against main 039bba5.
# Binaries (built on the build machine, release, stripped) in .devbin/s19b/bins.tar.xz:
#   A/headroom, A/decode_moe from main; B/headroom and B's test binaries
#   decode_moe, fp8_backend (headroom-cuda), cuda_engine, cuda_fp8 (headroom-engine).
# Prediction: the same bits (tests, greedy ids); the MoE block at one row
# back to back -1.5..-3 us; decode after 2k / 32k +2..4 % (bf16 and FP8);
# TTFT unchanged.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s19b; mkdir -p $T && tar -xJf .devbin/s19b/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B)"
timeout 200 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "^test |test result|panicked"
timeout 150 $B/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 100 $B/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/decode_moe --ignored --exact nan_row_stays_in_its_row_and_repeated_calls_agree 2>&1 | grep -E "ERROR SUMMARY|test result"
echo "=== decode_moe timing A B"
for run in 1; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 120 $d/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -vE "^running|^$|test result|^test " | sed "s/^/$side$run /"
done; done
echo "=== greedy ids A vs B"
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  for side in A B; do
    d=$([ $side = A ] && echo $A || echo $B)
    timeout 150 $d/headroom generate --backend cuda --synthetic $m --prompt "the same prompt for both" \
      --max-tokens 64 --json "$O/gen-$m-$side.json" > /dev/null 2>&1
  done
  python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print(sys.argv[1].split('/')[-1], 'same tokens' if a==b else 'TOKENS DIFFER', a[:6], b[:6])" "$O/gen-$m-A.json" "$O/gen-$m-B.json"
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
