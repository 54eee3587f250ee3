#!/usr/bin/env bash
# Session 15 call D: branch attnmix (paged attention: the output tile through shared memory,
# ItemOrder::Mixed by default). (1) the paged-attention GPU tests (f64 references, gate, splits,
# NaN, identity vs shuffled pools, both routes) + attention_split + memcheck of the gated case;
# (2) timings (fresh prompts by length, the W1 mixed step by order); (3) greedy tokens of 12
# prompts (1 … 4,100 tokens, 16 generated), main vs branch, compared; (4) TTFT 8k/32k + W1 x2,
# main vs branch (bench/gpu/ab_serving.sh).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n15d; mkdir -p $B && tar -xJf .devbin/n15d/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "=== (1) tests"
timeout 240 $B/paged_attention --ignored --test-threads 1 > "$O/paged_attention.txt" 2>&1; echo "paged_attention rc $?"
grep -E "^test |test result|panicked" "$O/paged_attention.txt"
timeout 120 $B/attention_split --ignored --test-threads 1 > "$O/attention_split.txt" 2>&1; echo "attention_split rc $?"
grep -E "test result|panicked|FAILED" "$O/attention_split.txt"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/paged_attention --ignored --test-threads 1 \
  --exact forced_splits_and_the_gate_match_f64 > "$O/memcheck.txt" 2>&1; echo "memcheck rc $?"
grep -E "ERROR SUMMARY|test result" "$O/memcheck.txt"
echo "=== (2) timings"
timeout 120 $B/mixt --ignored --nocapture --test-threads 1 > "$O/mixt.txt" 2>&1; echo "mixt rc $?"
grep -E "mixed_attn|prompt_attn|test result|panicked" "$O/mixt.txt"
echo "=== (3) greedy tokens, main vs branch"
python3 -c "
import json, random
r = random.Random(15)
with open('$O/prompts.jsonl', 'w') as f:
    for n in [1, 5, 63, 64, 65, 300, 1024, 1024, 1500, 2048, 3000, 4100]:
        f.write(json.dumps({'ids': [r.randrange(100, 5000) for _ in range(n)], 'max_tokens': 16}) + '\n')
"
for side in main new; do
  timeout 150 $B/headroom-$side generate --backend cuda --synthetic qwen3.6-35b-a3b --prompts "$O/prompts.jsonl" \
    --json "$O/gen-$side.jsonl" > "$O/gen-$side.txt" 2>&1; echo "generate $side rc $?"; tail -n 1 "$O/gen-$side.txt"
done
python3 - "$O/gen-main.jsonl" "$O/gen-new.jsonl" <<'PY'
import json, sys
def timing(k): return any(t in k for t in ('ms', '_s', 'time', 'latency', 'per_s', 'wall'))
def clean(v):
    if isinstance(v, dict): return {k: clean(x) for k, x in v.items() if not timing(k)}
    if isinstance(v, list): return [clean(x) for x in v]
    return v
def load(p):
    out = []
    for l in open(p):
        d = json.loads(l)
        if 'summary' in d: continue
        out.append(clean(d))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
same = sum(x == y for x, y in zip(a, b))
print(f"greedy outputs identical: {same} of {len(a)} (lines {len(a)} / {len(b)})")
for i, (x, y) in enumerate(zip(a, b)):
    if x != y: print("differs", i, {k: (x.get(k), y.get(k)) for k in x if x.get(k) != y.get(k)})
PY
echo "=== (4) A/B: main vs branch"
OUT=$O/ab timeout 400 bash bench/gpu/ab_serving.sh $B/headroom-main $B/headroom-new; echo "ab rc $?"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar czf all.tgz --exclude=all.tgz --exclude=log.txt . 2>/dev/null; find . -mindepth 1 ! -name all.tgz ! -name log.txt -delete; exit 0
