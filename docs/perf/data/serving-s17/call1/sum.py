#!/usr/bin/env python3
"""Sum an `ncu --metrics ... --csv` log by kernel name: launches, total and mean duration,
DRAM bytes, and the duration-weighted SM / DRAM / L2 throughput (% of peak)."""
import csv, sys, collections

rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]
ix = {n: i for i, n in enumerate(head)}
per = collections.defaultdict(dict)
for r in rows[1:]:
    if r[ix["Kernel Name"]] == "Kernel Name":
        continue
    p = per[r[ix["ID"]]]
    p["name"] = r[ix["Kernel Name"]].split("(")[0]
    try:
        v = float(r[ix["Metric Value"]].replace(",", ""))
    except ValueError:
        continue
    name, unit = r[ix["Metric Name"]], r[ix["Metric Unit"]]
    if name == "gpu__time_duration.sum":
        v *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1.0)
    if name.startswith("dram__bytes"):
        v *= {"byte": 1e-9, "Kbyte": 1e-6, "Mbyte": 1e-3, "Gbyte": 1.0}.get(unit, 1.0)
    p[name] = v
pct = ["sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "dram__throughput.avg.pct_of_peak_sustained_elapsed",
       "lts__throughput.avg.pct_of_peak_sustained_elapsed"]
k = collections.defaultdict(lambda: collections.defaultdict(float))
for p in per.values():
    s = k[p["name"]]
    d = p.get("gpu__time_duration.sum", 0.0)
    s["n"] += 1
    s["us"] += d
    s["gb"] += p.get("dram__bytes_read.sum", 0.0) + p.get("dram__bytes_write.sum", 0.0)
    for c in pct:
        s[c] += d * p.get(c, 0.0)
total = sum(s["us"] for s in k.values())
gb = sum(s["gb"] for s in k.values())
print(f"{len(per)} kernels, {total / 1e3:.2f} ms, DRAM {gb:.2f} GB")
print(f"{'kernel':58s} {'n':>4s} {'ms':>7s} {'us each':>8s} {'GB':>6s} {'TB/s':>5s} {'SM%':>5s} {'dram%':>5s} {'L2%':>5s}")
for name, s in sorted(k.items(), key=lambda kv: -kv[1]["us"]):
    us = s["us"] or 1.0
    print(f"{name[:58]:58s} {int(s['n']):4d} {s['us'] / 1e3:7.3f} {s['us'] / s['n']:8.1f} {s['gb']:6.2f} "
          f"{s['gb'] / us * 1e3:5.2f} " + " ".join(f"{s[c] / us:5.1f}" for c in pct))
