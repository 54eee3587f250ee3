"""Summary of bench/gpu/ab_serving.sh: medians per side and after / before.

Reads, in the folder given: ab-ttft-{before,after}.json (headroom.bench.ttft/2)
and ab-w1-{before,after}-N.json (headroom.bench.serve/3). Prints one line per
TTFT length and one for W1 (output tok/s: each run, the median per side, the
ratio), writes the same as ab_summary.json, and exits 1 when a side has no
report of a kind the other side has (a run that failed). Where both sides'
reports carry the GPU's energy (`joules_per_run` of bench ttft, the runs'
`gpu.joules_per_output_token` of bench serve), their medians and ratio too:
under a power cap a change's saving in energy is part of its gain.
"""

import json
import statistics
import sys
from pathlib import Path


def ttft(folder, side, field="median_ttft_ms"):
    """{prompt tokens: `field`} of one side (lengths without it left out), or
    None without a report."""
    path = folder / f"ab-ttft-{side}.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return {r["tokens"]: r[field] for r in report["results"] if r.get(field) is not None}


def w1(folder, side, value=lambda run: run["output_tokens_per_s"]):
    """`value` of each W1 run of one side, in run order (runs without it left out)."""
    runs = []
    for path in sorted(folder.glob(f"ab-w1-{side}-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        report = json.loads(path.read_text())
        runs.extend(v for v in map(value, report["runs"]) if v is not None)
    return runs


def joules_per_output_token(run):
    return (run.get("gpu") or {}).get("joules_per_output_token")


def energy(folder, out):
    """The energy entries of `out`, where both sides have them."""
    jb, ja = ttft(folder, "before", "joules_per_run"), ttft(folder, "after", "joules_per_run")
    for tokens in sorted(set(jb or {}) & set(ja or {})):
        out["ttft_joules_per_run"][str(tokens)] = {
            "before": jb[tokens],
            "after": ja[tokens],
            "ratio": ja[tokens] / jb[tokens],
        }
    eb = w1(folder, "before", joules_per_output_token)
    ea = w1(folder, "after", joules_per_output_token)
    if eb and ea:
        mb, ma = statistics.median(eb), statistics.median(ea)
        out["w1_joules_per_output_token"] = {"before": mb, "after": ma, "ratio": ma / mb}


def summary(folder):
    """The summary of the reports in `folder` and whether every kind has both sides."""
    out = {"ttft_ms": {}, "w1_output_tok_s": None, "ttft_joules_per_run": {},
           "w1_joules_per_output_token": None}
    complete = True
    tb, ta = ttft(folder, "before"), ttft(folder, "after")
    if (tb is None) != (ta is None):
        complete = False
    if tb is not None and ta is not None:
        for tokens in sorted(set(tb) | set(ta)):
            if tokens not in tb or tokens not in ta:
                complete = False
                continue
            out["ttft_ms"][str(tokens)] = {
                "before": tb[tokens],
                "after": ta[tokens],
                "ratio": ta[tokens] / tb[tokens],
            }
    wb, wa = w1(folder, "before"), w1(folder, "after")
    if bool(wb) != bool(wa):
        complete = False
    if wb and wa:
        mb, ma = statistics.median(wb), statistics.median(wa)
        out["w1_output_tok_s"] = {
            "before_runs": wb,
            "after_runs": wa,
            "before": mb,
            "after": ma,
            "ratio": ma / mb,
        }
    energy(folder, out)
    return out, complete


def main():
    if len(sys.argv) != 2:
        print("usage: ab_summary.py FOLDER", file=sys.stderr)
        return 1
    folder = Path(sys.argv[1])
    out, complete = summary(folder)
    for tokens, t in out["ttft_ms"].items():
        print(f"TTFT {tokens:>6} tokens: before {t['before']:.1f} ms, after {t['after']:.1f} ms, "
              f"after/before {t['ratio']:.3f}")
    w = out["w1_output_tok_s"]
    if w:
        runs = lambda xs: " / ".join(f"{x:.1f}" for x in xs)
        print(f"W1 output tok/s: before {runs(w['before_runs'])} (median {w['before']:.1f}), "
              f"after {runs(w['after_runs'])} (median {w['after']:.1f}), after/before {w['ratio']:.3f}")
    for tokens, j in out["ttft_joules_per_run"].items():
        print(f"TTFT {tokens:>6} tokens, GPU energy a run: before {j['before']:.1f} J, "
              f"after {j['after']:.1f} J, after/before {j['ratio']:.3f}")
    j = out["w1_joules_per_output_token"]
    if j:
        print(f"W1 GPU energy per generated token: before {j['before']:.4f} J, "
              f"after {j['after']:.4f} J, after/before {j['ratio']:.3f}")
    if not out["ttft_ms"] and not w:
        print(f"no A/B reports in {folder}", file=sys.stderr)
        complete = False
    (folder / "ab_summary.json").write_text(json.dumps(out, indent=1))
    if not complete:
        print("a kind of run has a report on one side only (a run failed)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
