#!/usr/bin/env bash
# Session 17, call 3. Before = main 9b8e1c1 (the session's start, .devbin/s17), after = e562597
# (.devbin/s17c: the 16-byte argmax slices, the 8-channel conv state advance, the 16-byte
# swiglu; with the backend_ops test binary). (1) the tests of the three kernels and memcheck
# on them; (2) TTFT 8k / 32k and W1 side by side (ab_serving.sh, interleaved, two W1 runs a side).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/s17; B=/tmp/s17c; mkdir -p $A $B
tar -xJf .devbin/s17/bins.tar.xz -C $A; tar -xJf .devbin/s17c/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) tests, after"
timeout 120 $B/backend_ops --ignored --test-threads 1 greedy conv1d gating_and_gates sampling 2>&1 | grep -E "^test |test result|panicked"
for t in sampling::greedy_rows_of_eights_take_16_byte_loads_and_the_same_rule fused::conv1d_k4x8_matches_cpu_across_strips_sequences_and_calls dense::gating_and_gates_match_f64; do
  timeout 120 compute-sanitizer --tool memcheck --print-limit 6 --error-exitcode 9 $B/backend_ops --ignored --exact $t 2>&1 | grep -E "ERROR SUMMARY|test result"
done
echo "=== (2) TTFT and W1 side by side"
AB_RUNS=2 OUT=$O/ab timeout 480 bash bench/gpu/ab_serving.sh $A/headroom $B/headroom > "$O/ab.txt" 2>&1; echo "ab rc $?"
tail -n 25 "$O/ab.txt"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
