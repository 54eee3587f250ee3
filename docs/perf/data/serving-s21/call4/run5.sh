#!/usr/bin/env bash
# Session 21, call 5: the batch/chunk test's failure of call 4 against main
# before the session. Binaries (.devbin/s21d/bins.tar.xz): a = cuda_engine at
# ad6104c, h = at 14b4bed.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21e; mkdir -p $T && tar -xJf .devbin/s21d/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
for s in a h; do
  echo "== $s"
  timeout 120 $T/$s/cuda_engine --ignored --nocapture --test-threads 1 --exact cuda_batch_and_chunk_invariance_bf16 2>&1 \
    | grep -E "panicked|request|worst|test result" -A1 | head -8
done > "$O/log.txt" 2>&1
cat "$O/log.txt"
