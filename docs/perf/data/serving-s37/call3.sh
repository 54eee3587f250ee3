#!/usr/bin/env bash
# Session 37, call 3 (any card; carry [".devbin/grow"]): call 2 showed the 32k
# runs' alternation with the step overlap off and with CUDA graphs off too,
# and call 1 with no driver call in any measured run. Is it the GPU's clocks?
# nvidia-smi samples SM clock, power and temperature every 20 ms while bench
# ttft runs 8 bf16 32k prompts. Prediction: the slow runs (≈ 576 ms) run at a
# lower mean SM clock than the fast ones (≈ 557), at the 700 W limit.
source bench/gpu/call_prelude.sh grow
B=/tmp/grow/h/headroom
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 20 > "$O/smi.csv" 2>&1 &
smi=$!
$B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 32768 --iterations 8 --warmup 1 2>&1 |
  while IFS= read -r l; do echo "$(date +%H:%M:%S.%N | cut -c1-12) $l"; done > "$O/ttft.txt"
kill $smi
grep -E "tokens, run" "$O/ttft.txt" | cut -c1-60
python3 - "$O" <<'PY'
import sys, datetime
o = sys.argv[1]
runs = []
for l in open(f"{o}/ttft.txt"):
    if "tokens, run" in l:
        t = datetime.datetime.strptime(l[:12], "%H:%M:%S.%f")
        ms = float(l.split("run ")[1].split(":")[1].split("ms")[0])
        runs.append((t, ms))
rows = []
for l in open(f"{o}/smi.csv"):
    p = [x.strip() for x in l.split(",")]
    try:
        t = datetime.datetime.strptime(p[0].split(" ")[1][:12], "%H:%M:%S.%f")
        rows.append((t, float(p[1].split()[0]), float(p[3].split()[0]), p[5]))
    except Exception:
        pass
for end, ms in runs:
    start = end - datetime.timedelta(milliseconds=ms)
    w = [r for r in rows if start <= r[0] <= end]
    if w:
        print(f"run {ms:7.1f} ms: {len(w):3d} samples, SM clock mean {sum(r[1] for r in w)/len(w):6.0f} MHz "
              f"min {min(r[1] for r in w):5.0f}, power mean {sum(r[2] for r in w)/len(w):5.0f} W, "
              f"throttle {sorted(set(r[3] for r in w))}")
PY
