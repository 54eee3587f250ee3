#!/usr/bin/env bash
# Session 15 call B: (1) the paged attention of a W1 mixed step by item order (branch attnmix's
# mixed_attention_timing); (2) ncu (full set, source counters) of the GDN prep at 8,192 rows
# (main's gdn test binary); (3) if the mixed order is ≥ 3 % faster: W1 side by side, main vs
# main + ItemOrder::Mixed as the default (bench/gpu/ab_serving.sh, no TTFT: prefill-only
# launches have no thin items).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15b; mkdir -p $B && tar -xJf .devbin/n15b/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== (1) mixed-step attention by item order"
timeout 240 $B/mixt --ignored --nocapture > "$O/mixt.txt" 2>&1; echo "mixt rc $?"
grep -E "mixed_attn|test result|panicked" "$O/mixt.txt"
ratio=$(sed -n 's/.*mixed-order .* us (\([0-9.]*\)x).*/\1/p' "$O/mixt.txt")
echo "ratio ${ratio:-none}"
echo "=== (2) ncu of the GDN prep (8,192 rows, full set, source)"
GDN_BENCH_T=8192 GDN_BENCH_REPS=2 GDN_BENCH_VARIANTS=prep-alone timeout 200 ncu --clock-control none \
  --kernel-name regex:gdn_chunk_prep --launch-skip 1 --launch-count 1 --set full --import-source yes \
  -o "$O/prep" $B/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture > "$O/ncu-prep.log" 2>&1
echo "ncu rc $?"; tail -n 3 "$O/ncu-prep.log"
ncu --import "$O/prep.ncu-rep" --page details > "$O/prep-details.txt" 2>&1
ncu --import "$O/prep.ncu-rep" --page source --csv --print-source sass > "$O/prep-source.csv" 2>&1 || \
  ncu --import "$O/prep.ncu-rep" --page source --csv > "$O/prep-source.csv" 2>&1
wc -l "$O/prep-details.txt" "$O/prep-source.csv"
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issue Slots Busy|No Eligible|Block Limit" "$O/prep-details.txt" | head -20
if [ -n "${ratio:-}" ] && python3 -c "import sys; sys.exit(0 if float('$ratio') < 0.97 else 1)"; then
  echo "=== (3) W1 A/B: main vs ItemOrder::Mixed"
  AB_LENGTHS= OUT=$O/ab timeout 330 bash bench/gpu/ab_serving.sh $B/headroom-main $B/headroom-mix; echo "ab rc $?"
else
  echo "=== (3) skipped: the mixed order is not 3 % faster"
fi
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null && find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete
