#!/usr/bin/env bash
# Session 32, call 1 (an H100: the H200 start was refused again).
#   A = .devbin/next (main 0657b47), B = .devbin/s32a (branch fp8share:
#   x quantized once for the FP8 MoE block's shared and routed experts).
# 1. B's GPU tests: fp8_ops gemm:: (the set on a quantized x bit for bit
#    against single calls), fp8_grouped's f64 checks (the routed experts on
#    a quantized x bit for bit, one and two passes) and the MoE block on FP8
#    experts against f64.
# 2. Greedy tokens of three prompts (40, 300, 1,500 ids; 12 tokens each,
#    run together) on the FP8 35B preset, A and B: equal ids.
# 3. W1 (1,000 x 1,024 / 128, c = 512, FP8 preset), fresh servers A B A B.
#    Prediction: +0.8-1.5 % (two quantizations of 8.5k x 2,048 a MoE layer
#    off each mixed step, 80 launches off each decode step).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in next s32a; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 120 /tmp/s32a/h/fp8_ops --ignored --test-threads 1 gemm:: > "$O/fp8_ops.txt" 2>&1
echo "fp8_ops gemm rc $? (t=$SECONDS)"; grep -E "^test |test result|panicked" "$O/fp8_ops.txt" | tail -8
timeout 240 /tmp/s32a/h/fp8_grouped --ignored --test-threads 1 match > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "^test |test result|panicked" "$O/fp8_grouped.txt" | tail -8
timeout 200 /tmp/s32a/h/fp8_grouped --ignored --test-threads 1 more_tokens >> "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped two passes rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/fp8_grouped.txt" | tail -2
P=docs/perf/data/serving-s32/fingerprint-prompts.jsonl
for v in next s32a; do
  timeout 120 /tmp/$v/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
    --prompts $P --json "$O/fp-$v.jsonl" > "$O/fp-$v.txt" 2>&1
  echo "fingerprint $v rc $? (t=$SECONDS): $(python3 -c 'import json,sys; print([json.loads(l).get("ids") for l in open(sys.argv[1]) if "ids" in l])' "$O/fp-$v.jsonl")"
done
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8
w1 fp8-a1 /tmp/next/h/headroom $F 8971
w1 fp8-b1 /tmp/s32a/h/headroom $F 8972
w1 fp8-a2 /tmp/next/h/headroom $F 8973
w1 fp8-b2 /tmp/s32a/h/headroom $F 8974
