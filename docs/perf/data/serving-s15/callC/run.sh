#!/usr/bin/env bash
# Session 15 call C: why the paged attention of 8 fresh 1,024-row prompts runs at ≈ 184 TFLOP/s
# (8k: ≈ 580): timings of 8 × 1,024 / 2 × 4,096 / 1 × 8,192 (branch attnmix's
# mixed_attention_timing), then ncu (full set, SASS source counters) of one launch of each.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15c; mkdir -p $B && tar -xJf .devbin/n15c/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== timings"
timeout 240 $B/mixt --ignored --nocapture --test-threads 1 > "$O/mixt.txt" 2>&1; echo "mixt rc $?"
grep -E "mixed_attn|prompt_attn|test result|panicked" "$O/mixt.txt"
echo "=== ncu: one launch of each prompt shape"
MIXT_ONCE=1 timeout 300 ncu --clock-control none --kernel-name regex:attn_paged --launch-skip 3 --launch-count 3 \
  --set full -o "$O/attn" $B/mixt --ignored --exact time_prompt_attention_by_length --nocapture > "$O/ncu.log" 2>&1
echo "ncu rc $?"; tail -n 8 "$O/ncu.log"
ncu --import "$O/attn.ncu-rep" --page details > "$O/attn-details.txt" 2>&1
ncu --import "$O/attn.ncu-rep" --page source --csv --print-source sass > "$O/attn-source.csv" 2>&1
wc -l "$O/attn-details.txt" "$O/attn-source.csv"
grep -E "attn_paged|Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Tensor" "$O/attn-details.txt" | head -60
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null; find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete; exit 0
