#!/usr/bin/env bash
# Session 15's planned first GPU call for the next session (not run; ≈ 8–9 min of run time:
# split (1)–(2) and (3)–(4) into two calls if the 600-s limit is near).
# Build on the build machine (main, 2 cores ≈ 3–10 min), into .devbin/n16/bins.tar.xz, carry ".devbin/n16":
#   cargo build --release -p headroom                                   -> headroom
#   cargo test --release -p headroom-engine --test cuda_engine --no-run -> cuda_engine
#   tar -cJf .devbin/n16/bins.tar.xz -C DIR headroom cuda_engine; cp this folder's files to .devbin/n16/
# What it checks: (1) session 15's one-command submission on CUDA — call I again: two runs of the
# 12 prompts at the default step budget must plan the same steps and give the same tokens;
# (2) the engine checks on the new main (check_engine.sh: 255-others, batch/chunk, generate);
# (3) W3 and W2's first 100 s on the new attention, (4) W1 on the FP8 preset (issue 26's bar).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/n16; mkdir -p $B && tar -xJf .devbin/n16/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) generate, two runs, default step budget"
for run in 1 2; do
  timeout 100 $B/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompts .devbin/n16/prompts.jsonl \
    --json "$O/gen-$run.jsonl" --log info,headroom_engine=debug > "$O/gen-$run.txt" 2>&1; echo "generate $run rc $?"
done
python3 - "$O" <<'PY'
import json, re, sys
ids = lambda p: [json.loads(l).get('ids') for l in open(p) if 'summary' not in json.loads(l)]
rows = lambda p: [int(m.group(1)) for l in open(p) for m in [re.search(r'engine step.* rows=(\d+)', l)] if m]
a, b = ids(f"{sys.argv[1]}/gen-1.jsonl"), ids(f"{sys.argv[1]}/gen-2.jsonl")
print(f"same tokens: {sum(x == y for x, y in zip(a, b))} of {len(a)}")
ra, rb = rows(f"{sys.argv[1]}/gen-1.txt"), rows(f"{sys.argv[1]}/gen-2.txt")
print("same steps after the warm-up:", ra[14:] == rb[14:], ra[14:20], rb[14:20])
PY
echo "=== (2) check_engine.sh"
OUT=$O/engine timeout 300 bash bench/gpu/check_engine.sh $B/cuda_engine $B/headroom > "$O/check_engine.txt" 2>&1; echo "check_engine rc $?"
grep -E "worst|FAILED|test result|passed" "$O/check_engine.txt" | head -20
echo "=== (3) W3, then W2's first 100 s, on one fresh default server"
$B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8801 > "$O/serve-w23.log" 2>&1 &
SP=$!
for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-w23.log" && break; sleep 0.5; done
timeout 90 $B/headroom bench serve --url http://127.0.0.1:8801 --concurrency 16 --requests 16 --prompt-len 32768 \
  --max-tokens 256 --json "$O/w3.json" > "$O/w3.txt" 2>&1; echo "w3 rc $?"
grep -iE "requests at|output tok/s|^ttft" "$O/w3.txt" | head -4
timeout 130 $B/headroom bench serve --url http://127.0.0.1:8801 --concurrency 200 --requests 400 --prompt-len 1000 \
  --max-tokens 2000 --time-limit-s 100 --json "$O/w2.json" > "$O/w2.txt" 2>&1; echo "w2 rc $?"
grep -iE "output tok/s|^itl" "$O/w2.txt" | head -3
kill -TERM $SP; wait $SP
echo "=== (4) W1 and TTFT 32k on the FP8 preset (the same binary on both sides: two runs)"
AB_SYNTHETIC=qwen3.6-35b-a3b-fp8 AB_LENGTHS=32768 AB_RUNS=1 OUT=$O/fp8 timeout 240 \
  bash bench/gpu/ab_serving.sh $B/headroom $B/headroom; echo "fp8 rc $?"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
