#!/usr/bin/env bash
# Session 15 call E: are the branch's paged-attention bits main's? (1) the output fingerprint of
# one random mixed batch from main's kernel and the branch's (same test source, paged_raw);
# (2) greedy tokens of call D's 12 prompts, each binary twice: is `generate` deterministic run
# to run (the control call D lacked)?
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15e; mkdir -p $B && tar -xJf .devbin/n15e/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== (1) fingerprints"
for side in main new; do
  timeout 120 $B/fp-$side --ignored --nocapture --exact print_the_output_fingerprint_of_a_random_mixed_batch 2>&1 | grep -E "fingerprint|test result|panicked" | sed "s/^/$side: /"
done
echo "=== (2) generate, each binary twice"
python3 -c "
import json, random
r = random.Random(15)
with open('$O/prompts.jsonl', 'w') as f:
    for n in [1, 5, 63, 64, 65, 300, 1024, 1024, 1500, 2048, 3000, 4100]:
        f.write(json.dumps({'ids': [r.randrange(100, 5000) for _ in range(n)], 'max_tokens': 16}) + '\n')
"
for run in main-1 new-1 main-2 new-2; do
  timeout 150 $B/headroom-${run%-*} generate --backend cuda --synthetic qwen3.6-35b-a3b --prompts "$O/prompts.jsonl" \
    --json "$O/gen-$run.jsonl" > "$O/gen-$run.txt" 2>&1; echo "generate $run rc $?"
done
python3 - "$O" <<'PY'
import json, sys
def ids(p):
    return [json.loads(l).get('ids') for l in open(p) if 'summary' not in json.loads(l)]
g = {r: ids(f"{sys.argv[1]}/gen-{r}.jsonl") for r in ['main-1', 'main-2', 'new-1', 'new-2']}
for a, b in [('main-1', 'main-2'), ('new-1', 'new-2'), ('main-1', 'new-1'), ('main-2', 'new-2')]:
    same = sum(x == y for x, y in zip(g[a], g[b]))
    print(f"{a} vs {b}: {same} of {len(g[a])} prompts give the same 16 tokens")
PY
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null; find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete; exit 0
