#!/usr/bin/env bash
# Session 16, call 6: `--batch-invariant` (branch invariant, .devbin/s16d): (1) the engine's GPU
# tests, the new batch-invariant ones among them (issue 22's 1e-2); (2) every grouped-GEMM family
# bitwise equal per row (the landed test); (3) what the mode costs at batch 1: bench ttft --decode
# 64 after 2,048 tokens, plain and --batch-invariant, bf16 then FP8.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s16d; mkdir -p $B && tar -xJf .devbin/s16d/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) cuda_engine"
timeout 120 $B/cuda_engine --ignored --nocapture --test-threads 1 > "$O/engine.txt" 2>&1; echo "cuda_engine rc $?"
grep -E "^test |worst|panicked at|^[a-z_0-9]+ .*(paged|contiguous|fused|composed)" "$O/engine.txt" | head -30
echo "=== (2) families"
timeout 60 $B/moe --ignored --nocapture --test-threads 1 ws::every_grouped_family 2>&1 | grep -E "families|test result|panicked" | tail -4
echo "=== (3) decode cost"
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  for f in "" --batch-invariant; do
    timeout 70 $B/headroom bench ttft --backend cuda --synthetic $m --lengths 2048 --iterations 1 --decode 64 $f \
      > "$O/ttft-$m$f.txt" 2>&1; echo "$m $f rc $?"; grep -E "TTFT" "$O/ttft-$m$f.txt" | sed 's/layer 3.*decode/... decode/'
  done
done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
