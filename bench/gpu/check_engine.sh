#!/usr/bin/env bash
# On the GPU machine: the engine on the CUDA backend (bf16) — 8 requests of
# mixed lengths concurrently vs each alone, chunks of 37 mixed with decode,
# on the transformers fixtures (composed and fused routes); bar: logits
# <= 2e-2 relative, the same first greedy token. Then the step overlap
# (the same tokens with it on and off), then CUDA graphs (the same logits
# to the bit with them on and off; a lone decode's graph replay under
# compute-sanitizer memcheck), then `headroom generate --backend
# cuda --prompts` end to end with its --json summary.
# Usage: bench/gpu/check_engine.sh [cuda_engine test binary] [headroom binary]
#          [cuda_overlap test binary] [cuda_graphs test binary]
#   (build: cargo test --release -p headroom-engine --test cuda_engine
#    --test cuda_overlap --test cuda_graphs --no-run; cargo build --release -p headroom).
#   Results in $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
TEST=${1:-$(ls -t target/release/deps/cuda_engine-* 2>/dev/null | grep -v '\.d$' | head -n1)}
BIN=${2:-target/release/headroom}
OVERLAP=${3:-$(ls -t target/release/deps/cuda_overlap-* 2>/dev/null | grep -v '\.d$' | head -n1)}
GRAPHS=${4:-$(ls -t target/release/deps/cuda_graphs-* 2>/dev/null | grep -v '\.d$' | head -n1)}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
status=0

echo "=== engine batch/chunk invariance on CUDA ==="
timeout 200 "$TEST" --ignored --nocapture --test-threads 1 2>&1 | tee "$OUT/engine-cuda-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "engine tests FAILED"; status=1; }

echo "=== the step overlap on CUDA ==="
if [ -x "$OVERLAP" ]; then
  timeout 200 "$OVERLAP" --ignored --nocapture --test-threads 1 2>&1 | tee "$OUT/engine-overlap-tests.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "overlap tests FAILED"; status=1; }
else
  echo "overlap tests FAILED: no cuda_overlap test binary"; status=1
fi

echo "=== CUDA graphs ==="
if [ -x "$GRAPHS" ]; then
  timeout 300 "$GRAPHS" --ignored --nocapture --test-threads 1 2>&1 | tee "$OUT/engine-graphs-tests.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "graph tests FAILED"; status=1; }
  if command -v compute-sanitizer > /dev/null; then
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$GRAPHS" --ignored --nocapture \
      --test-threads 1 cuda_a_lone_decode_updates_one_graph 2>&1 | tail -n 20 | tee "$OUT/engine-graphs-memcheck.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "graph memcheck FAILED"; status=1; }
  else
    echo "graph memcheck SKIPPED: no compute-sanitizer"
  fi
else
  echo "graph tests FAILED: no cuda_graphs test binary"; status=1
fi

echo "=== headroom generate --backend cuda --prompts ==="
P="$OUT/prompts.jsonl"
: > "$P"
for n in 3 40 300 1000 17 64 128 5; do
  python3 -c "import json; print(json.dumps({'ids': [(i * 7 + $n) % 500 for i in range($n)], 'max_tokens': 16}))" >> "$P"
done
timeout 200 "$BIN" generate --backend cuda --synthetic tiny-d256 --prompts "$P" \
  --json "$OUT/engine-generate.jsonl" > "$OUT/engine-generate.txt" 2>&1
rc=$?
tail -n 3 "$OUT/engine-generate.txt"
tail -n 1 "$OUT/engine-generate.jsonl" 2>/dev/null
[ "$rc" -eq 0 ] || { echo "generate FAILED"; status=1; }
exit $status
