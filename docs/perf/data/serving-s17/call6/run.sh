#!/usr/bin/env bash
# Session 17, call 6 (main f7240a7, .devbin/s17f). Every other 32k `bench ttft` run is slower
# (call 4: 544 / 570 / 543 / 566 ms; call 5: ≈ 1 % with the allocator's placement fixed, so not
# the allocator). Is it the GPU's clocks (power or thermal)? nvidia-smi logs SM clock, power,
# temperature and throttle reasons every 20 ms while `bench ttft --lengths 32768 --iterations 7`
# runs (the tool prints each run's TTFT with a timestamp-free line; the log's times are the
# host's, `date +%s.%N` printed before and after).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s17f; mkdir -p $B; tar -xJf .devbin/s17f/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu \
  --format=csv,noheader -lms 20 > "$O/smi.csv" 2>&1 &
SMI=$!
echo "start $(date +%s.%N)"
timeout 150 $B/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 32768 --iterations 7 --warmup 1 \
  2>&1 | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done > "$O/ttft.txt"
echo "end $(date +%s.%N)"
kill $SMI
grep -E "run [0-9]+:" "$O/ttft.txt"
python3 - "$O/smi.csv" "$O/ttft.txt" <<'PY'
import sys, csv, datetime
rows = []
for r in csv.reader(open(sys.argv[1])):
    if len(r) < 6: continue
    try:
        t = datetime.datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        rows.append((t, float(r[1].split()[0]), float(r[3].split()[0]), float(r[5]), ""))
    except Exception:
        continue
runs = []
for l in open(sys.argv[2]):
    if " run " in l and "ms (" in l:
        t = float(l.split()[0]); ms = float(l.split("run ")[1].split(":")[1].split("ms")[0])
        runs.append((t - ms / 1e3, t, ms))
for a, b, ms in runs:
    w = [x for x in rows if a <= x[0] <= b]
    if not w: print(f"run {ms:.1f} ms: no samples"); continue
    clk = [x[1] for x in w]; pw = [x[2] for x in w]; tmp = [x[3] for x in w]
    reasons = sorted(set(x[4] for x in w))
    print(f"run {ms:7.1f} ms: {len(w):3d} samples, SM MHz min {min(clk):.0f} mean {sum(clk)/len(clk):.0f}, "
          f"power max {max(pw):.0f} W mean {sum(pw)/len(pw):.0f} W, temp {min(tmp):.0f}-{max(tmp):.0f} C, reasons {reasons}")
PY
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
gzip -f "$O/smi.csv"
