#!/usr/bin/env bash
# Session 15 call F: ncu (full set, SASS source) of the staged-epilogue paged kernel on 8 fresh
# prompts of 1,024 rows (main cf6053b's mixed_attention_timing): what is left after the epilogue?
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15f; mkdir -p $B && tar -xJf .devbin/n15f/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
MIXT_ONCE=1 timeout 200 ncu --clock-control none --kernel-name regex:attn_paged --launch-skip 3 --launch-count 1 \
  --set full -o "$O/attn" $B/mixt --ignored --exact time_prompt_attention_by_length --nocapture > "$O/ncu.log" 2>&1
echo "ncu rc $?"; tail -n 3 "$O/ncu.log"
ncu --import "$O/attn.ncu-rep" --page details > "$O/attn-details.txt" 2>&1
ncu --import "$O/attn.ncu-rep" --page source --csv --print-source sass > "$O/attn-source.csv" 2>&1
python3 docs/perf/data/serving-s15/ncu_stalls.py "$O/attn-source.csv" 40 > "$O/attn-stalls.txt"
cat "$O/attn-stalls.txt"
grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Achieved Occupancy" "$O/attn-details.txt"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && rm -f attn.ncu-rep && gzip attn-source.csv; exit 0
