#!/usr/bin/env python3
"""Sum an `ncu --section SpeedOfLight --csv` log by kernel name: launches, total and mean
duration, and the duration-weighted SM / memory / DRAM / L2 throughput (% of peak)."""
import csv, sys, collections

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
ix = {n: i for i, n in enumerate(head)}
k = collections.defaultdict(lambda: collections.defaultdict(float))
per = collections.defaultdict(dict)
for r in rows[1:]:
    if r[ix["Kernel Name"]] == "Kernel Name":
        continue
    per[r[ix["ID"]]]["name"] = r[ix["Kernel Name"]].split("(")[0]
    v = r[ix["Metric Value"]].replace(",", "")
    try:
        v = float(v)
    except ValueError:
        continue
    name, unit = r[ix["Metric Name"]], r[ix["Metric Unit"]]
    if name == "Duration":
        v *= {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1.0)
    per[r[ix["ID"]]][name] = v
cols = ["Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "L2 Cache Throughput"]
for p in per.values():
    s = k[p["name"]]
    d = p.get("Duration", 0.0)
    s["n"] += 1
    s["us"] += d
    for c in cols:
        s[c] += d * p.get(c, 0.0)
total = sum(s["us"] for s in k.values())
print(f"{len(per)} kernels, {total / 1e3:.2f} ms")
print(f"{'kernel':60s} {'n':>4s} {'ms':>8s} {'us each':>8s} {'SM%':>5s} {'mem%':>5s} {'dram%':>5s} {'L2%':>5s}")
for name, s in sorted(k.items(), key=lambda kv: -kv[1]["us"]):
    us = s["us"] or 1.0
    print(f"{name[:60]:60s} {int(s['n']):4d} {s['us'] / 1e3:8.3f} {s['us'] / s['n']:8.1f} "
          + " ".join(f"{s[c] / us:5.1f}" for c in cols))
