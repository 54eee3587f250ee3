"""Sums an ncu --csv log (gpu__time_duration.sum per kernel) by kernel name."""
import csv, sys, collections
rows = []
with open(sys.argv[1], newline="") as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r.get("Metric Unit", "ns")
    us = v / 1000 if unit == "ns" else v if unit in ("us", "usecond") else v * 1000 if unit in ("ms", "msecond") else v / 1000
    name = r["Kernel Name"].split("(")[0].strip()
    rows.append((name, us, r.get("Grid Size", "")))
tot = sum(u for _, u, _ in rows)
by = collections.defaultdict(lambda: [0, 0.0, set()])
for n, u, g in rows:
    by[n][0] += 1; by[n][1] += u; by[n][2].add(g)
print(f"kernels {len(rows)}, sum {tot:.1f} us")
print(f"{'kernel':60s} {'n':>5s} {'us each':>9s} {'us total':>10s} {'%':>6s}  grids")
for n, (c, u, gs) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{n[:60]:60s} {c:5d} {u / c:9.2f} {u:10.1f} {100 * u / tot:6.1f}  {' '.join(sorted(gs))[:60]}")
