#!/usr/bin/env bash
# Session 32, call 2. Binaries: s32a = branch fp8share (= main 016abb8's
# code: x quantized once for the FP8 MoE block), s32b = branch normcodes
# (+ the add + RMSNorm writes the FP8 codes its readers take),
# s31start = main 378b2bc (before session 31; the H200's baseline).
# 1. s32b's GPU tests: fp8_backend (every case, the new norm_codes ones
#    among them: codes and scales equal to the quantization kernel's, the
#    norm's bits unchanged, the GEMM and the MoE block on the codes bit for
#    bit), fp8_ops gemm::.
# 2. Greedy tokens (fingerprint-prompts.jsonl) on the FP8 35B, s32a, s32b.
# 3. On an H100: W1 FP8 (1,000 x 1,024 / 128, c = 512), s32a s32b s32a s32b.
#    Prediction: +0.6-1.2 % (80 reads of the normed rows off a mixed step,
#    80 launches off a decode step).
#    On an H200: W1 FP8 and bf16, s31start vs s32b (the bars' card; session
#    26: bf16 5,599.2, FP8 6,039.4), then bench ttft 2k/32k --decode 64.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s32a s32b s31start; do [ -d .devbin/$v ] && mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 150 /tmp/s32b/h/fp8_backend --ignored --test-threads 1 --skip timing > "$O/fp8_backend.txt" 2>&1
echo "fp8_backend rc $? (t=$SECONDS)"; grep -E "^test |test result|panicked" "$O/fp8_backend.txt" | grep -v timing | tail -12
timeout 100 /tmp/s32b/h/fp8_ops --ignored --test-threads 1 gemm:: > "$O/fp8_ops.txt" 2>&1
echo "fp8_ops gemm rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/fp8_ops.txt" | tail -3
P=docs/perf/data/serving-s32/fingerprint-prompts.jsonl
for v in s32a s32b; do
  timeout 120 /tmp/$v/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
    --prompts $P --json "$O/fp-$v.jsonl" > /dev/null 2>&1
  echo "fingerprint $v rc $? (t=$SECONDS): $(python3 -c 'import json,sys; print([json.loads(l).get("ids") for l in open(sys.argv[1]) if "ids" in l])' "$O/fp-$v.jsonl")"
done
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  w1 fp8-a1 /tmp/s32a/h/headroom $F 8971
  w1 fp8-b1 /tmp/s32b/h/headroom $F 8972
  w1 fp8-a2 /tmp/s32a/h/headroom $F 8973
  w1 fp8-b2 /tmp/s32b/h/headroom $F 8974
  exit 0
fi
w1 fp8-s31start /tmp/s31start/h/headroom $F 8971
w1 fp8-s32b /tmp/s32b/h/headroom $F 8972
w1 bf16-s31start /tmp/s31start/h/headroom $M 8973
w1 bf16-s32b /tmp/s32b/h/headroom $M 8974
for m in $M $F; do
  timeout 150 /tmp/s32b/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
