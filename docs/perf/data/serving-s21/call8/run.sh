#!/usr/bin/env bash
# Session 21, call 8: the bf16 MoE decode block at 3 rows, the row count
# call 7 left unmeasured (main takes the FMA _rows gate_up at 2 and 3 rows,
# the 40-column tensor-core one from 4). moe_decode_timing with rows 1, 2,
# 3, 4, 8. Binaries (.devbin/s21h/bins.tar.xz, decode_moe only): m = main
# 6e10473 (FMA _rows at 2-3 rows); g = 4ffa972 (the tensor-core _rows entry
# from two rows). A B A B.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s21h; mkdir -p $T && tar -xJf .devbin/s21h/bins.tar.xz -C $T
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
for run in 1 2; do for s in m g; do
  timeout 90 $T/$s/decode_moe --ignored --nocapture --test-threads 1 moe_decode_timing 2>&1 | grep -E "chained block|panicked" | sed -E "s/; grouped.*//; s/^/$s$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
