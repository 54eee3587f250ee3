#!/usr/bin/env bash
# Session 29: session 28's H100 questions (serving-s28/next/call.sh serve and
# stripe) asked on an H200 with the bf16 35B-A3B held to the H100's memory:
# `--memory-budget-mib 6656` is the ~6.5 GiB the bf16 weights left on the
# 80 GB H100 at the default fraction (session 27), so the pool plans are the
# H100's (same model, same memory model); the speeds are the H200's.
#   A  default snapshot slots (from memory), 1,024 / 256 at c = 64, then
#      C  the shared-prefix load (256 x 4,608, 4,096 shared / 128, c = 64);
#   B  --prefix-cache-state-slots 16 (sessions 26-27's count), c = 64;
#   G  A's server (default stripe): a 16k prompt alone (twice), after C;
#   P  branch `stripeplan` (h/headroom-sp: an auto stripe planned whole only
#      within a third of the memory, STRIPE_PLAN_SHARE), default flags:
#      c = 64, then the 16k prompt alone (twice).
# main here is b34990d: the runtime stripe stays within what the budget
# leaves after the pools, so the 16k prompt's stripe is the H100's too.
# Predictions (serving.md session 28, for the H100): A ~26 running against
# B's 17, A's c64 +30-50 % over B; C >= 95 % of the shared tokens cached;
# P (session 29): ~46 running, a context of ~70k, c64 ~1.5x A's, the 16k
# TTFT a few % above G's (two steps instead of one).
# carry [".devbin/next"].
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next; B=$T/h/headroom; mkdir -p $T; [ -x $B ] || tar -xJf .devbin/next/bins.tar.xz -C $T
S=$O/starved; mkdir -p "$S"
SECONDS=0
serve_loads() { # "SERVE FLAGS" "NAME BENCH-ARGS..." ...  ($BIN: the binary, default main's)
  local flags=$1; shift
  local bin=${BIN:-$B}
  local first=${1%% *}
  # shellcheck disable=SC2086
  HEADROOM_DECODE_STATS=1 $bin serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8920 \
    --memory-budget-mib 6656 $flags > "$S/serve-$first.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 400); do grep -q "listening on" "$S/serve-$first.log" && break; sleep 0.5; done
  echo "--- serve $flags (t=$SECONDS)"
  grep -E "serve on cuda|lowered" "$S/serve-$first.log" | cut -c1-900
  for load in "$@"; do
    local name=${load%% *} args=${load#* }
    # shellcheck disable=SC2086
    timeout 120 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name.json" $args > "$S/$name.txt" 2>&1
    echo "$name: $(grep -E 'output tok/s' "$S/$name.txt" | head -1)"
    grep -E "^ttft|^itl|cached|running" "$S/$name.txt" | head -5
  done
  grep "decode stats" "$S/serve-$first.log" | tail -1 | cut -c1-400
  grep -iE "out of memory" "$S/serve-$first.log" | head -3
  kill -TERM $sp; wait $sp; echo "exit $? t=$SECONDS"
}
C64="--concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256"
L16="--concurrency 1 --requests 2 --prompt-len 16384 --max-tokens 1"
{
  echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  serve_loads "" "A $C64" \
    "C --concurrency 64 --requests 256 --prompt-len 4608 --shared-prefix-len 4096 --max-tokens 128" \
    "G16k $L16"
  serve_loads "--prefix-cache-state-slots 16" "B $C64"
  BIN=$T/h/headroom-sp serve_loads "" "P $C64" "P16k $L16"
} 2>&1 | tee "$O/starved-log.txt"
tar -C "$S" -czf "$O/starved.tar.gz" . && rm -rf "$S"
