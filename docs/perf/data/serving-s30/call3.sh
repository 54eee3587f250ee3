#!/usr/bin/env bash
# Session 30, call 3: what a CUDA step holds above its live bytes, against
# the memory model's step transient (crates/engine/tests/cuda_memory.rs,
# printing every case), then the whole 35B presets' lone prompts in one step
# (`bench ttft --solo-stripe 65536`: the `peak +` column) to check that four
# layers hold the bytes a row of forty.
# Build: cargo test --release -p headroom-engine --test cuda_memory --no-run;
#   copy it and the release headroom (stripped) to .devbin/mem/. carry [".devbin/mem"].
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
SECONDS=0
{
echo "card: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
timeout 300 .devbin/mem/cuda_memory --ignored --nocapture --test-threads 1 2>&1 | grep -vE "^\s*$"
echo "rc ${PIPESTATUS[0]} t=$SECONDS"
for p in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  for r in fused fallback; do
    echo "--- bench ttft $p $r (t=$SECONDS)"
    timeout 150 .devbin/mem/headroom bench ttft --backend cuda --synthetic $p --attn-execution $r \
      --solo-stripe 65536 --lengths 4096,16384 --iterations 1 --warmup 1 2>&1 | grep -E "tokens  TTFT|rror"
  done
done
} 2>&1 | tee "$O/call3-log.txt"
