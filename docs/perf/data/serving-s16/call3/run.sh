#!/usr/bin/env bash
# Session 16, call 3: call 2's change (the Ws units handed out at run time by an atomic counter)
# with each unit's tile passed to the MMA warpgroups beside its first stage (call 2 had them load
# expert_offsets after their full wait: down +2 % at 8k, +5-7 % at 32k). Before = main dd01a9f
# (.devbin/s16), call 2's binaries (.devbin/s16b, timing only), after = .devbin/s16c.
# (1) the moe tests (f64 on every family, Ws bit reproducibility across runs and pass sizes,
#     the equality with the default), memcheck on the Ws sanitizer case; (2) the routed-block
#     timing, before and after alternating; (3) ncu of the new kernels at 8,192 tokens (DRAM bytes);
# (4) TTFT 8k / 32k and W1 side by side (ab_serving.sh, interleaved, two W1 runs a side).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/s16; B=/tmp/s16c; C2=/tmp/s16b; mkdir -p $A $B $C2
tar -xJf .devbin/s16/bins.tar.xz -C $A; tar -xJf .devbin/s16c/bins.tar.xz -C $B; tar -xJf .devbin/s16b/bins.tar.xz -C $C2
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) moe tests, after"
timeout 200 $B/moe --ignored --test-threads=1 --skip bench_the_35b --skip timing_ > "$O/moe-tests.txt" 2>&1; echo "moe tests rc $?"
grep -E "test result|FAILED|panicked" "$O/moe-tests.txt" | head
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moe --ignored --exact ws::ws_sanitizer_case 2>&1 | tail -n 3
echo "=== (2) routed-block timing: before (A), after (B), call 2 (C2), twice"
for side in A B C2 A B C2; do
  d=$([ $side = A ] && echo $A || { [ $side = B ] && echo $B || echo $C2; })
  timeout 100 $d/moe --ignored --nocapture --test-threads 1 ws::timing_wgmma_vs_ws_routed_block 2>&1 | grep "imp=Ws" | sed "s/^/$side /"
done
echo "=== (3) ncu, after, 8,192 tokens"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout 120 $NCU --kernel-name regex:'moe_gemm_(gate_up|down)_ws' --launch-skip 36 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
  $B/moe --ignored --nocapture --test-threads 1 ws::timing_wgmma_vs_ws_routed_block > "$O/ncu-ws-after.txt" 2>&1; echo "ncu rc $?"
grep -E "moe_gemm|Duration|DRAM Throughput|L2 Cache Throughput|L2 Hit|dram__bytes|lts__t_sector_hit" "$O/ncu-ws-after.txt"
echo "=== (4) TTFT and W1 side by side"
AB_RUNS=2 OUT=$O/ab timeout 420 bash bench/gpu/ab_serving.sh $A/headroom $B/headroom > "$O/ab.txt" 2>&1; echo "ab rc $?"
tail -n 25 "$O/ab.txt"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
