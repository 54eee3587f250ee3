#!/usr/bin/env bash
# Session 15 call H (main 8560c20): (1) the timing tests after their shared paged-batch builder
# (step256_timing, mixed_attention_timing with the fingerprint); (2) W1 side by side, main
# d57b8b0 (items longest first, the production default until 8560c20) vs 8560c20
# (ItemOrder::Mixed the default).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15h; mkdir -p $B && tar -xJf .devbin/n15h/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== (1) timing tests"
timeout 150 $B/mixt --ignored --nocapture --test-threads 1 > "$O/mixt.txt" 2>&1; echo "mixt rc $?"
grep -E "mixed_attn|prompt_attn|fingerprint|test result|panicked" "$O/mixt.txt"
timeout 200 $B/step256 --ignored --nocapture --test-threads 1 > "$O/step256.txt" 2>&1; echo "step256 rc $?"
grep -E "test result|panicked|follow-up attention" "$O/step256.txt"
echo "=== (2) W1: longest first vs mixed"
AB_LENGTHS= OUT=$O/ab timeout 300 bash bench/gpu/ab_serving.sh $B/headroom-longest $B/headroom-mixed; echo "ab rc $?"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null; find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete; exit 0
