#!/usr/bin/env bash
# Session 17, call 8: call 7's new test with its second shape fixed (it set 256 local experts of
# 64: the unfused reference call refused it); then memcheck on it (.devbin/s17h: decode_moe).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s17h; mkdir -p $B; tar -xJf .devbin/s17h/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
timeout 100 $B/decode_moe --ignored --exact the_router_with_the_norm_folded_in_gives_the_two_launches_bits 2>&1 | tail -n 12
timeout 120 compute-sanitizer --tool memcheck --print-limit 6 --error-exitcode 9 $B/decode_moe --ignored --exact the_router_with_the_norm_folded_in_gives_the_two_launches_bits 2>&1 | grep -E "ERROR SUMMARY|test result"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
