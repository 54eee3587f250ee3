#!/usr/bin/env bash
# Session 19, call 3: how many columns a gate_up warp takes (GATE_UP_COLS, the
# MoE decode kernels), now that the down kernel loads its routed rows before
# its wait (call 2, merged): at one row 3 columns make 198 gate_up CTAs, two on
# 66 SMs, whose register file then has no room for a down CTA until they
# drain; 4 columns make 144 CTAs (12 SMs with two), 5 make 117 (none).
# Binaries in .devbin/s19c/bins.tar.xz (release, stripped): A = main bbc9965
# (3 columns), 4 and 5 = the same tree with GATE_UP_COLS 4 / 5 (kernel and
# launcher); each: headroom, decode_moe, fp8_backend.
# Prediction: the block at one row back to back 27.0 -> 25.5-26.5 us at 5
# columns if gate_up's time holds; decode after 2k +1-3 %; more rows unchanged
# or slower (fewer CTAs where every SM already has work).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s19c; mkdir -p $T && tar -xJf .devbin/s19c/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
for v in 4 5; do
  echo "=== tests ($v columns)"
  timeout 150 $T/$v/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked"
  timeout 100 $T/$v/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked"
done
echo "=== MoE decode block timing, A (3 columns), 4, 5"
for v in A 4 5; do
  timeout 100 $T/$v/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "chained|gate_up median" | sed "s/^/$v /"
  timeout 100 $T/$v/fp8_backend --ignored --nocapture --test-threads 1 fp8_moe_timing 2>&1 | grep -vE "^running|^$|test result|^test " | sed "s/^/$v /"
done
echo "=== greedy ids"
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  for v in A 4 5; do
    timeout 150 $T/$v/headroom generate --backend cuda --synthetic $m --prompt "the same prompt for both" \
      --max-tokens 64 --json "$O/gen-$m-$v.json" > /dev/null 2>&1
  done
  python3 -c "import json,sys; a,b,c=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print(sys.argv[1].split('/')[-1], 'same tokens' if a==b==c else 'TOKENS DIFFER', a[:4], b[:4], c[:4])" "$O/gen-$m-A.json" "$O/gen-$m-4.json" "$O/gen-$m-5.json"
done
echo "=== bench ttft A 4 5 A 4 5"
for run in 1 2; do for v in A 4 5; do
  for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
    timeout 150 $T/$v/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 \
      2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$m $v$run /"
  done
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
