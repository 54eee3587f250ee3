#!/usr/bin/env bash
# Branch fp8xf32 (not run, not merged): the MoE decode gate_up (moe_decode_gate_up, bf16 experts,
# and moe_decode_gate_up_fp8, FP8 routed and shared experts) widens x's row to f32 in shared memory
# once a CTA (widen_row, while the expert's first weights load) and its dots read f32 x (dot_pass /
# fp8_dot_pass's f32 forms) instead of converting bf16 x per weight: one instruction a weight fewer
# (session 18 call 5 found the FP8 decode kernels issue-sensitive: the e4m3 conversion instruction
# gave +3.7 % / +5.5 %). Same products in the same order, so the same bits; the other moe_decode
# entries byte-identical (NVRTC 13.0 sm_90a; gate_up 5,392 -> 5,256 instructions, 112 registers;
# gate_up_fp8 5,544 -> 5,296, 128 registers; no spill; gate_up_fp8_sbf16 unchanged: f32 x spilled).
# Prediction: MoE decode block 1 row -0.5-1.5 us; decode after 2k bf16 +1-2 %, FP8 +1.5-2.5 %.
# Build into .devbin/xf32-{main,branch}/bins.tar.xz: headroom (cargo build --release -p headroom);
# for the branch also decode_moe, fp8_backend (headroom-cuda) and cuda_fp8 (headroom-engine) test
# binaries; main's fp8_backend too (the timing's baseline).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/xf-main; B=/tmp/xf-branch; mkdir -p $A $B
tar -xJf .devbin/xf32-main/bins.tar.xz -C $A; tar -xJf .devbin/xf32-branch/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 150 $B/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 100 $B/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/fp8_backend --ignored fused 2>&1 | grep -E "ERROR SUMMARY|test result"
# The same greedy tokens on the FP8 preset (the same bits).
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --prompt "the same prompt for both" \
    --max-tokens 64 --json "$O/gen-$side.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print('same tokens' if a==b else 'TOKENS DIFFER', a[:8], b[:8])" "$O/gen-A.json" "$O/gen-B.json"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 100 $d/fp8_backend --ignored --nocapture --exact fp8_moe_timing 2>&1 | grep -E "rows (1|8):" | sed -E "s/^/$side$run /"
  for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
    timeout 150 $d/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 \
      2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$m $side$run /"
  done
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
