# Stall samples of an ncu "--page source --print-source sass --csv" export (gzip), by reason, by opcode
# and by line: `python3 sass_ops.py src-KERNEL.csv.gz [TOP_LINES]` (session 46; session 41 call 2's inline script).
import csv, sys, re, collections, gzip
rows = list(csv.reader(gzip.open(sys.argv[1], 'rt')))
hi = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
h = rows[hi]; body = [r for r in rows[hi + 1:] if len(r) == len(h)]
num = lambda s: float(s.replace(",", "") or 0) if s not in ("-", "") else 0.0
S = h.index("Warp Stall Sampling (All Samples)"); X = h.index("Instructions Executed"); src = h.index("Source")
reasons = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
tot = sum(num(r[S]) for r in body) or 1
print(f"total stall samples {tot:.0f}, warp instructions {sum(num(r[X]) for r in body):.0f}, {len(body)} SASS lines")
rt = collections.Counter()
for r in body:
    for i in reasons: rt[h[i]] += num(r[i])
print("by reason:", ", ".join(f"{k[6:]} {100*v/tot:.1f}%" for k, v in rt.most_common(10)))
ops = collections.Counter(); opx = collections.Counter()
for r in body:
    m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_]+(\.[A-Z0-9_]+)?)", r[src]); op = m.group(2) if m else "?"
    ops[op] += num(r[S]); opx[op] += num(r[X])
print("by opcode (stall share, instructions):")
for op, v in ops.most_common(14): print(f"  {100 * v / tot:5.1f}%  {opx[op]:>10.0f}  {op}")
def top(r):
    rs = sorted(((num(r[i]), h[i][6:]) for i in reasons), reverse=True)[:3]
    return " ".join(f"{n}:{100 * v / max(num(r[S]), 1):.0f}%" for v, n in rs if v > 0)
print("top lines:")
for idx, r in sorted(enumerate(body), key=lambda x: -num(x[1][S]))[:int(sys.argv[2]) if len(sys.argv) > 2 else 20]:
    print(f"{idx:5d} {100 * num(r[S]) / tot:5.1f}%  exec {r[X]:>8}  {r[src].strip()[:60]:60}  {top(r)}")
