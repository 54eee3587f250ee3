#!/usr/bin/env bash
# Session 15 call I (main c28b6cb): is `generate --prompts` on CUDA reproducible run to run when
# the steps are the same? 12 prompts (call D's), runs A1 A2 with the default step budget and
# B1 B2 with --step-tokens 16384 (every prompt in the first step), engine step logs kept.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15i; mkdir -p $B && tar -xJf .devbin/n15i/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
for run in A1 A2 B1 B2; do
  extra=""; [ "${run#B}" != "$run" ] && extra="--step-tokens 16384"
  timeout 100 $B/headroom-final generate --backend cuda --synthetic qwen3.6-35b-a3b --prompts .devbin/n15i/prompts.jsonl \
    --json "$O/gen-$run.jsonl" $extra --log info,headroom_engine=debug > "$O/gen-$run.txt" 2>&1; echo "generate $run rc $?"
done
python3 - "$O" <<'PY'
import json, sys, re
def ids(p): return [json.loads(l).get('ids') for l in open(p) if 'summary' not in json.loads(l)]
def steps(p):
    return [int(m.group(1)) for l in open(p) for m in [re.search(r'engine step.* rows=(\d+)', l)] if m]
g = {r: ids(f"{sys.argv[1]}/gen-{r}.jsonl") for r in ['A1', 'A2', 'B1', 'B2']}
for a, b in [('A1', 'A2'), ('B1', 'B2'), ('A1', 'B1')]:
    same = sum(x == y for x, y in zip(g[a], g[b]))
    print(f"{a} vs {b}: {same} of {len(g[a])} prompts the same 16 tokens")
for r in ['A1', 'A2', 'B1', 'B2']:
    s = steps(f"{sys.argv[1]}/gen-{r}.txt")
    print(r, len(s), "steps, rows:", s)
PY
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
exit 0
