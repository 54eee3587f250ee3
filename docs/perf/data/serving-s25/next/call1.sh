#!/usr/bin/env bash
# Session 25 call 1 (build: VARIANT_ENGINE=<cuda_engine of a tree whose
# classic cuBLAS handle has no workspace> build.sh; carry .devbin/s25a).
# 1. The engine's graph tests with the kernel-node hash in a graph's shape
#    (crates/cuda/src/graph.rs): a capture whose cuBLAS kernels or clusters
#    differ from a kept graph's is instantiated, not updated.
#    Prediction: the lone decodes (next_d128, moe_d256, the 35B preset)
#    now agree with eager to the bit, and kernels_changed > 0 on the
#    composed route (cuBLAS picks kernels by the exact key count).
# 2. cuda_batch_and_chunk_invariance_bf16 with and without the classic
#    handle's workspace (session 24: moe_d64 composed 3.37e-2 > 2e-2).
# 3. bench ttft --decode 64 after 2k, graphs off / on (the walk's host cost).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s25; mkdir -p $T && tar -xJf .devbin/s25a/bins.tar.xz -C $T
B=$T/h/headroom
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
ttft() { # GRAPHS STATS
  HEADROOM_DECODE_STATS=$2 timeout 150 $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048 \
    --iterations 1 --warmup 1 --decode 64 --step-overlap on --cuda-graphs $1 2>&1 |
    grep -E "tokens  TTFT|decode stats|graphs|Error|error" | grep -v "^engine" | tail -3 | cut -c1-1200
}
{
echo "=== cuda_graphs (engine)"
timeout 330 $T/h/cuda_graphs --ignored --nocapture --test-threads 1 2>&1 |
  grep -E "^test |test result|panicked|GraphStats|differing" | cut -c1-600 | head -30
echo "t=$SECONDS"
for v in cuda_engine cuda_engine_variant; do
  echo "=== invariance: $v"
  [ -x $T/h/$v ] && timeout 100 $T/h/$v --ignored --nocapture --exact cuda_batch_and_chunk_invariance_bf16 2>&1 |
    grep -E "^test |test result|panicked|moe_d" | cut -c1-300 | head -12
done
echo "t=$SECONDS"
for g in off on off on; do echo "--- graphs $g"; ttft $g 0; done
echo "t=$SECONDS"
} 2>&1 | tee "$O/log-call1.txt"
