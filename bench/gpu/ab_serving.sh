#!/usr/bin/env bash
# On the GPU machine, in one call: two headroom release binaries side by side,
# the way docs/perf reports a change (medians and ratios of one run, never
# numbers from different machines): TTFT (`bench ttft`, median of
# --iterations) and W1 (`bench serve`, 1,000 requests of 1,024 prompt tokens
# and 128 generated at concurrency 512, each on a fresh server), the two
# binaries interleaved before, after, before, after ... so drift hits both.
# Every report lands in $OUT (or ./gpu-out); the summary (medians per side,
# after / before) is printed by bench/gpu/ab_summary.py and written to
# $OUT/ab_summary.json.
#
# Usage: bench/gpu/ab_serving.sh BEFORE AFTER
#   AB_RUNS=2              W1 runs per side (interleaved)
#   AB_SYNTHETIC=qwen3.6-35b-a3b   the synthetic model (e.g. qwen3.6-35b-a3b-fp8)
#   AB_LENGTHS=8192,32768  TTFT prompt lengths; empty: no TTFT
#   AB_W1=1                0: no W1
#   AB_BEFORE_ENV / AB_AFTER_ENV   "NAME=VALUE ..." set for that side only
#   AB_W1_TIMEOUT=120      seconds a W1 run may take
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -ne 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
    echo "usage: $0 BEFORE AFTER (two executable headroom binaries)" >&2
    exit 1
fi
BEFORE=$1
AFTER=$2
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
source bench/gpu/serve_wait.sh
RUNS=${AB_RUNS:-2}
MODEL=${AB_SYNTHETIC:-qwen3.6-35b-a3b}
LENGTHS=${AB_LENGTHS-8192,32768}
status=0

bin_of() { [ "$1" = before ] && echo "$BEFORE" || echo "$AFTER"; }
env_of() { [ "$1" = before ] && echo "${AB_BEFORE_ENV:-}" || echo "${AB_AFTER_ENV:-}"; }

if [ -n "$LENGTHS" ]; then
    for side in before after; do
        echo "=== ttft $side ($MODEL, $LENGTHS) ==="
        env $(env_of $side) timeout 300 "$(bin_of $side)" bench ttft --backend cuda --synthetic "$MODEL" \
            --lengths "$LENGTHS" --iterations 3 --json "$OUT/ab-ttft-$side.json" > "$OUT/ab-ttft-$side.txt" 2>&1 \
            || { echo "ttft $side FAILED"; status=1; }
        grep -E "TTFT" "$OUT/ab-ttft-$side.txt"
    done
fi

port=8700
if [ "${AB_W1:-1}" != 0 ]; then
    for run in $(seq 1 "$RUNS"); do
        for side in before after; do
            port=$((port + 1))
            tag=$side-$run
            echo "=== W1 $tag ($MODEL) ==="
            : > "$OUT/ab-serve-$tag.log"  # exists before the first grep below
            env $(env_of $side) "$(bin_of $side)" serve --backend cuda --synthetic "$MODEL" --port $port \
                > "$OUT/ab-serve-$tag.log" 2>&1 &
            sp=$!
            if ! serve_listening "$OUT/ab-serve-$tag.log" $sp 600; then
                echo "server $tag did not start: $(tail -n 2 "$OUT/ab-serve-$tag.log" | tr '\n' ' ')"
                status=1
                kill -TERM $sp 2>/dev/null; wait $sp 2>/dev/null
                continue
            fi
            timeout "${AB_W1_TIMEOUT:-120}" "$(bin_of $side)" bench serve --url http://127.0.0.1:$port \
                --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128 \
                --json "$OUT/ab-w1-$tag.json" > "$OUT/ab-w1-$tag.txt" 2>&1 || { echo "W1 $tag FAILED"; status=1; }
            grep -E "output tok/s" "$OUT/ab-w1-$tag.txt"
            kill -TERM $sp; wait $sp
        done
    done
fi

python3 bench/gpu/ab_summary.py "$OUT" | tee "$OUT/ab_summary.txt" || status=1
echo "ab_serving: status $status"
exit $status
