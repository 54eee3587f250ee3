#!/usr/bin/env bash
# One device call of a wgmma tuning round (docs/perf/cuda-attention.md, tuning
# rounds): times the fused route of several variants of the same binary side by
# side with `headroom bench attention` (variants are environment settings: NVRTC
# defines, warpgroups), picks the fastest that beats the reference variant at
# every length and dtype with bench errors inside the tolerances, then runs the
# full correctness checks on the reference (and on the winner) and the PyTorch
# comparison on the winner (the reference when nothing wins).
# Usage (repo root, GPU machine):
#   ORDER="ref a b ref.2" bash docs/perf/data/cuda-wgmma-tuning.sh BIN ref:ENV+ENV a:ENV b:ENV
# (ENV = NAME=VALUE, '+' between several; "ref:" = no change; a ".2" suffix in
# ORDER times a variant again, and its runs are averaged.) Results: $OUT/tuning.json.
# HEAD_DIM (default 256) picks the head dim of the timed shape; CHECK=0 skips the
# correctness checks and VS_TORCH=0 the PyTorch comparison.
set -uo pipefail
BIN=$1; shift
HEAD_DIM=${HEAD_DIM:-256}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
TMP=$(mktemp -d)
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
declare -A CFG
REF=""
for spec in "$@"; do
    name=${spec%%:*}
    CFG[$name]=${spec#*:}
    [ -n "$REF" ] || REF=$name
done
ORDER=${ORDER:-"$*"}
envs() { echo "${CFG[$1]}" | tr '+' ' '; }
for run in $ORDER; do
    name=${run%%:*}; name=${name%.2}
    for dt in bf16 f16; do
        echo "=== bench $run $dt: $(envs "$name")"
        env $(envs "$name") timeout 120 "$BIN" bench attention --backend cuda --dtype $dt \
            --lengths 8192,32768 --routes fused --q-heads 16 --kv-heads 2 --head-dim $HEAD_DIM \
            --warmup 3 --iterations 10 --json "$TMP/$run-$dt.json" >/dev/null 2>"$TMP/$run-$dt.err" \
            || { echo "bench FAILED"; tail -n 5 "$TMP/$run-$dt.err"; }
    done
done
WIN=$(python3 - "$TMP" "$OUT/tuning.json" "$REF" <<'PY'
import json, os, sys, statistics
tmp, out, ref = sys.argv[1:4]
runs = {}
for f in sorted(os.listdir(tmp)):
    if not f.endswith(".json"):
        continue
    run, dt = f[:-5].rsplit("-", 1)
    for s in json.load(open(os.path.join(tmp, f)))["samples"]:
        runs.setdefault(run.split(".")[0], {}).setdefault(f"{s['length']}/{dt}", []).append(
            {"run": run, "median_ms": s["median_ms"], "rel_err": s.get("rel_err")})
base = {k: statistics.mean(x["median_ms"] for x in v) for k, v in runs.get(ref, {}).items()}
table, best, best_gain = {}, ref, 1.005  # a winner must beat the reference by 0.5 % (geometric mean)
tol = {"bf16": 1e-2, "f16": 2e-3}
for name, cases in runs.items():
    ratios = {k: base[k] / statistics.mean(x["median_ms"] for x in v) for k, v in cases.items() if k in base}
    accurate = all(x["rel_err"] is not None and x["rel_err"] <= tol[k.split("/")[1]]
                   for k, v in cases.items() for x in v)
    table[name] = {"cases": cases, "speedup_vs_ref": ratios, "accurate": accurate}
    print(f"{name:>8} accurate={accurate} " + " ".join(f"{k}:{r:.3f}" for k, r in sorted(ratios.items())),
          file=sys.stderr)
    if name != ref and accurate and len(ratios) == len(base) and min(ratios.values()) > 0.995:
        gain = statistics.geometric_mean(ratios.values())
        if gain > best_gain:
            best, best_gain = name, gain
json.dump({"reference": ref, "runs": table, "winner": best, "winner_gain": best_gain}, open(out, "w"), indent=1)
print(best)
PY
)
echo "winner: '${WIN}' ($(envs "$WIN"))"
if [ "${CHECK:-1}" != 0 ]; then
echo "=== checks of the reference ($(envs "$REF"))"
env $(envs "$REF") OUT=$OUT timeout 240 bash bench/gpu/check_attention.sh "$BIN" 2>&1 | tail -n 12
echo "check_attention rc=${PIPESTATUS[0]}"
fi
if [ "${CHECK:-1}" != 0 ] && [ "$WIN" != "$REF" ]; then
    echo "=== checks of the winner ($(envs "$WIN"))"
    env $(envs "$WIN") timeout 200 "$BIN" kernels check --json "$OUT/check-winner.json" 2>&1 | tail -n 3
    echo "winner check rc=${PIPESTATUS[0]}"
fi
if [ "${VS_TORCH:-1}" != 0 ]; then
echo "=== vs torch ($(envs "$WIN"))"
env $(envs "$WIN") PYTHONUNBUFFERED=1 timeout 200 python3 bench/gpu/attention_vs_torch.py \
    --headroom "$BIN" --json "$OUT/vs_torch.json" 2>&1 | grep -v '^\$' | tail -n 24
fi
for f in "$TMP"/*.err; do grep -il "error\|panic" "$f" && tail -n 3 "$f"; done
