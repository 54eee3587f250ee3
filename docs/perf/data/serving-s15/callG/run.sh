#!/usr/bin/env bash
# Session 15 call G: the epilogue's row offsets once a row and rcp.rn (branch attnepi2, v2)
# against main cf6053b (v1): (1) the output fingerprint (must equal main's 3ec80cb7a47b2b31);
# (2) the paged-attention GPU tests; (3) timings v1 / v2 / v1 / v2; (4) TTFT + W1 side by side.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15g; mkdir -p $B && tar -xJf .devbin/n15g/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== (1) fingerprint"
timeout 120 $B/mixt-v2 --ignored --nocapture --exact print_the_output_fingerprint_of_a_random_mixed_batch 2>&1 | grep -E "fingerprint|panicked"
echo "=== (2) tests"
timeout 240 $B/paged_attention --ignored --test-threads 1 > "$O/paged_attention.txt" 2>&1; echo "paged_attention rc $?"
grep -E "test result|panicked|FAILED" "$O/paged_attention.txt"
echo "=== (3) timings"
for v in v1 v2 v1 v2; do
  timeout 120 $B/mixt-$v --ignored --nocapture --test-threads 1 --skip print_the 2>&1 | grep -E "mixed_attn (longest|mixed|prompts|decode)|prompt_attn" | sed "s/^/$v: /"
done
echo "=== (4) A/B v1 vs v2"
OUT=$O/ab timeout 400 bash bench/gpu/ab_serving.sh $B/headroom-v1 $B/headroom-v2; echo "ab rc $?"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null; find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete; exit 0
