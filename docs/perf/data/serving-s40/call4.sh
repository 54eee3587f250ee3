#!/usr/bin/env bash
# Session 40, call 4 (any sm_90a card; ≈ 90 s; carry [".devbin/head"]).
# Where the FP8 decode gate+up and down kernels' warps stall, instruction by instruction
# (docs/perf/cuda-decode.md session 40: gustage refuted the two-latency chain; which link binds?).
# ncu's source counters (warp-state sampling per SASS instruction) for one launch of each
# kernel in a decode step after 2,048 tokens; the 30 SASS lines with the most stall samples of
# each, with their stall reasons, and the samples summed by region (routing, loads, mma, sums).
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom
for k in moe_decode_gate_up_fp8_mma moe_decode_down_fp8_mma; do
  HEADROOM_PROFILE_STEP=6 timeout 80 ncu --profile-from-start off -k regex:"^$k\$" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --cache-control none --clock-control none \
    -o "$O/src-$k" $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048 \
    --iterations 1 --warmup 1 --decode 16 > "$O/src-$k.log" 2>&1
  echo "ncu $k rc $? (t=$SECONDS)"
  ncu -i "$O/src-$k.ncu-rep" --page source --print-source sass --csv > "$O/src-$k.csv" 2> "$O/src-$k.err"
  echo "source page rc $? ($(wc -l < "$O/src-$k.csv") lines)"
  python3 - "$O/src-$k.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hi = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" == c for c in r)), None)
if hi is None: sys.exit(print("no header:", rows[:3]))
h = rows[hi]; body = [r for r in rows[hi + 1:] if len(r) == len(h)]
print("columns:", h[:14])
def col(*names):
    for n in names:
        for i, c in enumerate(h):
            if c.startswith(n): return i
    return None
src = col("Source"); samp = col("Warp Stall Sampling (All", "Warp Stall Sampling"); ex = col("Instructions Executed")
if samp is None: sys.exit(print("no stall sampling column"))
num = lambda s: float(s.replace(",", "") or 0)
tot = sum(num(r[samp]) for r in body) or 1
print(f"total stall samples {tot:.0f} over {len(body)} SASS lines")
for r in sorted(body, key=lambda r: -num(r[samp]))[:30]:
    print(f"{100 * num(r[samp]) / tot:5.1f}%  exec {r[ex] if ex is not None else '-':>8}  {r[src][:90]}")
PY
done
gzip -f "$O"/src-*.csv 2>/dev/null; true
