#!/usr/bin/env bash
# Session 17, call 5. Why is every other 32k `bench ttft` run 5 % slower (runs 0, 2 ≈ 543 ms,
# runs 1, 3 ≈ 568 ms, in every session's logs)? Hypothesis: the device allocator's pools were
# last-freed-first, so equal-sized transient buffers swap blocks between consecutive runs of
# the same step (a period of 2). Before = 90d4f1b (.devbin/s17d), after = the allocator handing
# out the lowest free address of a size first (.devbin/s17e). (1) 32k TTFT, 8 runs each
# (--iterations 7 --warmup 1), A B A B; (2) one W1 run each (the allocator serves the server too).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/s17d; B=/tmp/s17e; mkdir -p $A $B
tar -xJf .devbin/s17d/bins.tar.xz -C $A; tar -xJf .devbin/s17e/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) 32k TTFT, every run"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 32768 --iterations 7 --warmup 1 \
    --json "$O/ttft-$side$run.json" > "$O/ttft-$side$run.txt" 2>&1
  echo "$side$run: $(grep -E 'run [0-9]+:' "$O/ttft-$side$run.txt" | sed -E 's/.*run ([0-9]+): ([0-9.]+) ms.*/\2/' | tr '\n' ' ') | $(grep -E 'TTFT' "$O/ttft-$side$run.txt" | sed -E 's/ +peak.*//' | tr -s ' ')"
done; done
echo "=== (2) W1, one run each"
OUTAB=$O/ab AB_RUNS=1 AB_LENGTHS= OUT=$O/ab timeout 300 bash bench/gpu/ab_serving.sh $A/headroom $B/headroom > "$O/ab.txt" 2>&1; echo "ab rc $?"
grep -E "W1 output|completed requests" "$O/ab.txt"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
