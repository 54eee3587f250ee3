#!/usr/bin/env bash
# Session 16, call 1: main dd01a9f on the H200 (its last kernel edits never ran on a GPU), then
# the profile that picks this session's kernel work.
# Build (build machine): cargo build --release -p headroom; cargo test --release -p headroom-engine
#   --test cuda_engine --no-run; cargo test --release -p headroom-cuda --test paged_attention
#   --test mixed_attention_timing --test moe --no-run; the five binaries stripped into
#   .devbin/s16/bins.tar.xz (carry .devbin/s16).
# (1) paged attention tests + the fingerprint of a random mixed batch (session 15: 3ec80cb7a47b2b31)
#     + the mixed-step timing; (2) generate --prompts twice at the default step budget (session 15's
#     one-command submission: same steps, same tokens); (3) check_engine.sh; (4) the Ws routed
#     GEMMs: medians, then ncu's sections at 8,192 and 32,768 tokens.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s16; mkdir -p $B && tar -xJf .devbin/s16/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
D=docs/perf/data/serving-s16/call1
{
echo "=== (1) paged attention"
timeout 150 $B/paged_attention --ignored --test-threads 1 > "$O/paged.txt" 2>&1; echo "paged_attention rc $?"
grep -E "test result|FAILED|panicked" "$O/paged.txt" | head
timeout 90 $B/mixed_attention_timing --ignored --nocapture --test-threads 1 > "$O/mixed.txt" 2>&1; echo "mixed rc $?"
grep -E "fingerprint|order=|total" "$O/mixed.txt" | head -20
echo "=== (2) generate, two runs, default step budget"
for run in 1 2; do
  timeout 100 $B/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompts $D/prompts.jsonl \
    --json "$O/gen-$run.jsonl" --log info,headroom_engine=debug > "$O/gen-$run.txt" 2>&1; echo "generate $run rc $?"
done
python3 - "$O" <<'PY'
import json, re, sys
ids = lambda p: [json.loads(l).get('ids') for l in open(p) if 'summary' not in json.loads(l)]
rows = lambda p: [int(m.group(1)) for l in open(p) for m in [re.search(r'engine step.* rows=(\d+)', l)] if m]
a, b = ids(f"{sys.argv[1]}/gen-1.jsonl"), ids(f"{sys.argv[1]}/gen-2.jsonl")
print(f"same tokens: {sum(x == y for x, y in zip(a, b))} of {len(a)}")
ra, rb = rows(f"{sys.argv[1]}/gen-1.txt"), rows(f"{sys.argv[1]}/gen-2.txt")
print("steps run 1:", ra[:24]); print("steps run 2:", rb[:24])
PY
echo "=== (3) check_engine.sh"
OUT=$O/engine timeout 300 bash bench/gpu/check_engine.sh $B/cuda_engine $B/headroom > "$O/check_engine.txt" 2>&1; echo "check_engine rc $?"
grep -E "worst|FAILED|test result|passed|failed" "$O/check_engine.txt" | head -20
echo "=== (4) Ws routed GEMMs"
timeout 120 $B/moe --ignored --nocapture --test-threads 1 ws::timing_wgmma_vs_ws_routed_block > "$O/ws-timing.txt" 2>&1; echo "ws timing rc $?"
grep "ws timing" "$O/ws-timing.txt"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
SECS="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
for skip in 36 72; do
  timeout 150 $NCU --kernel-name regex:'moe_gemm_(gate_up|down)_ws' --launch-skip $skip --launch-count 2 $SECS \
    $B/moe --ignored --nocapture --test-threads 1 ws::timing_wgmma_vs_ws_routed_block > "$O/ncu-ws-$skip.txt" 2>&1
  echo "ncu skip $skip rc $?"
done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
