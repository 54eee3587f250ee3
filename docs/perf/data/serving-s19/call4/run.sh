#!/usr/bin/env bash
# Session 19, call 4 (short: the session's last device seconds): branch gucols
# (gate_up at 5 columns a warp from two rows, 3 at one row) — its decode_moe
# suite and block timing, and the FP8 block timing, on the H200.
# Binaries in .devbin/s19d/B (release, stripped): decode_moe, fp8_backend.
# Prediction: every test passes; the block back to back as call 3's columns
# (1 row as A ≈ 27.0 us, 2 / 4 / 8 rows as the 5-column build ≈ 42.2 / 77.1 / 138.8 us).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=.devbin/s19d/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
timeout 100 $B/decode_moe --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|chained"
timeout 40 $B/fp8_backend --ignored --nocapture --test-threads 1 fp8_moe_timing 2>&1 | grep -E "rows [1248]:|test result"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
