#!/usr/bin/env bash
# Session 32, call 4 (its first form, s31start vs main only, was refused an H200). Binaries: s31start = main 378b2bc (before session 31),
# s32c = main 129599d's code (sessions 31-32 merged), s32d = branch
# gatedcodes (+ the GDN's gated norm writes the out projection's FP8 codes).
# 1. s32d's fp8_backend tests and backend_ops' f32-residual norm test (the
#    16-byte norm's body now shared with its FP8 form) (the gated norm's codes equal the quantization
#    kernel's, the norm's bits unchanged, the GEMM on them bit for bit; the
#    add + RMSNorm's as in call 2) and greedy tokens on the FP8 35B.
# 2. H200 (the bars' card): W1 FP8 s31start, s32c, s32d; W1 bf16 s31start,
#    s32c; bench ttft 2k/32k --decode 64 on s32c, bf16 and FP8. Predictions:
#    FP8 s31start -> s32c +7-9 %, s32c -> s32d +0.3-0.6 %; bf16 +0.5-1.5 %.
#    H100: W1 FP8 s32c, s32d (one pair: the budget left after four refused
#    H200 starts).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s31start s32c s32d; do [ -d .devbin/$v ] && mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 120 /tmp/s32d/h/fp8_backend --ignored --test-threads 1 --skip timing > "$O/fp8_backend.txt" 2>&1
echo "fp8_backend rc $? (t=$SECONDS)"; grep -E "^test |test result|panicked" "$O/fp8_backend.txt" | grep -E "norm_codes|result|panicked"
timeout 60 /tmp/s32d/h/backend_ops --ignored --test-threads 1 f32_residual > "$O/backend_ops.txt" 2>&1
echo "backend_ops f32_residual rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/backend_ops.txt"
timeout 120 /tmp/s32d/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-s32d.jsonl" > /dev/null 2>&1
echo "fingerprint s32d rc $? (t=$SECONDS): $(python3 -c 'import json,sys; print([json.loads(l).get("ids") for l in open(sys.argv[1]) if "ids" in l])' "$O/fp-s32d.jsonl")"
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for v in s32c s32d; do w1 fp8-$v /tmp/$v/h/headroom $F 8971; echo "  $(cap "$O/serve-fp8-$v.log")"; done
  exit 0
fi
for v in s31start s32c s32d; do w1 fp8-$v /tmp/$v/h/headroom $F 8971; echo "  $(cap "$O/serve-fp8-$v.log")"; done
for v in s31start s32c; do w1 bf16-$v /tmp/$v/h/headroom $M 8972; echo "  $(cap "$O/serve-bf16-$v.log")"; done
for m in $M $F; do
  timeout 150 /tmp/s32c/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
