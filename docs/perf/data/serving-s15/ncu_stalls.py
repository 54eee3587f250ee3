#!/usr/bin/env python3
"""Summarises `ncu --page source --csv --print-source sass` output: per kernel in the file,
the warp-stall samples by reason and by region (prologue / key loop / epilogue: the loop is
the instructions executed more often than once a warp), and the top instructions.
Usage: ncu_stalls.py SOURCE.csv [TOP] [noregion]  (noregion: a kernel without a key loop)"""
import csv
import sys


def kernels(path):
    lines = open(path).read().split("\n")
    starts = [i for i, l in enumerate(lines) if l.startswith('"Kernel Name"')] + [len(lines)]
    for a, b in zip(starts, starts[1:]):
        rows = list(csv.reader(lines[a:b]))
        hdr = rows[1]
        yield rows[0][1], hdr, [r for r in rows[2:] if len(r) == len(hdr)]


def num(x):
    return int(x) if x.isdigit() else 0


def main():
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    for name, hdr, data in kernels(sys.argv[1]):
        samples = hdr.index("Warp Stall Sampling (All Samples)")
        executed = hdr.index("Instructions Executed")
        reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
        total = sum(num(r[samples]) for r in data)
        by = {hdr[i][6:]: sum(num(r[i]) for r in data) for i in reasons}
        print(f"== {name}: {len(data)} instructions, {total} samples")
        print("  by reason: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in sorted(by.items(), key=lambda x: -x[1])[:8]))
        ex = [num(r[executed]) for r in data]
        once = min(e for e in ex if e > 0)
        loop = [k for k, e in enumerate(ex) if e > 1.5 * once]
        if loop and "noregion" not in sys.argv:
            lo, hi = min(loop), max(loop)
            part = lambda a, b: 100 * sum(num(data[k][samples]) for k in range(a, b)) / total
            print(f"  by region (executed once a warp = {once}): before the loop {part(0, lo):.1f}%, "
                  f"loop {part(lo, hi + 1):.1f}%, after {part(hi + 1, len(data)):.1f}%")
        for k in sorted(range(len(data)), key=lambda k: -num(data[k][samples]))[:top]:
            r = data[k]
            why = sorted(((num(r[i]), hdr[i][6:]) for i in reasons), reverse=True)[:2]
            print(f"  {k:5d} {r[samples]:>6} {r[executed]:>9}  {r[1].strip()[:60]:60s} {why}")


if __name__ == "__main__":
    main()
