# Summarises ncu --csv --page details output (gzipped): per kernel the launch, occupancy,
# scheduler, memory and instruction figures and the largest issue-stall reasons (session 20, call 4).
import csv, sys, io, gzip
want = ["Duration", "Registers Per Thread", "Grid Size", "Block Size", "Achieved Occupancy", "Theoretical Occupancy",
        "Eligible Warps Per Scheduler", "Issued Warp Per Scheduler", "No Eligible",
        "Warp Cycles Per Issued Instruction", "DRAM Throughput", "Memory Throughput",
        "Executed Instructions", "Executed Ipc Active", "Compute (SM) Throughput", "L2 Hit Rate"]
txt = gzip.open(sys.argv[1], "rt").read().splitlines()
start = next(i for i, l in enumerate(txt) if l.startswith('"ID"'))
rows = list(csv.DictReader(io.StringIO("\n".join(txt[start:]))))
seen = {}
for r in rows:
    k = (r["ID"], r["Kernel Name"][:34])
    seen.setdefault(k, {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return 0.0
for (i, name), m in seen.items():
    print(f"-- {i} {name}")
    print("   " + "; ".join(f"{w} {m[w][0]} {m[w][1]}".strip() for w in want if w in m))
    stalls = sorted(((num(v), k) for k, (v, u) in m.items() if "issue_stalled" in k), reverse=True)
    print("   stalls/issue: " + ", ".join(f"{k.replace('smsp__average_warps_issue_stalled_', '').replace('_per_issue_active.ratio', '')} {v:.2f}" for v, k in stalls[:7]))
