#!/usr/bin/env bash
# Prepared in session 28 for the next session with a GPU (an H100 comes
# first). Build on the build machine:
#   bash bench/gpu/pack_tests.sh .devbin/all     # the GPU test binaries
#   bash bench/gpu/pack_bins.sh .devbin/next     # the release headroom
# carry [".devbin/all", ".devbin/next"]; four calls, each under 600 s:
#   bash docs/perf/data/serving-s28/next/call.sh check   (check_all, 480 s)
#   bash docs/perf/data/serving-s28/next/call.sh serve   (runs A-C below)
#   bash docs/perf/data/serving-s28/next/call.sh fraction (runs D-E below)
#   bash docs/perf/data/serving-s28/next/call.sh stripe   (runs F, G below)
# In order of value if the device time runs short: serve, check, stripe,
# fraction.
# check: the first whole GPU suite on this card (bench/gpu/check_all.sh);
#   known to fail: cuda_engine's cuda_batch_and_chunk_invariance_bf16
#   (default mode is not batch-invariant; docs/perf/serving.md session 16).
# serve (bf16 35B-A3B, `serve` with default flags, which on an 80 GB H100
#   lowers the model's context to the largest that fits, session 27):
#   A  1,024 / 256 at c = 64, default snapshot slots (now from memory);
#   B  the same with --prefix-cache-state-slots 16 (session 27's count);
#   C  the shared-prefix workload (256 x 4,608 with 4,096 shared / 128,
#      c = 64) with the default slots, on A's server after A.
#   Prediction (serving.md session 28): A 2 snapshot slots, ≈ 26 running,
#   1,400-1,600 output tok/s; B 16 slots, 17 running, ≈ 1,081 (session 27);
#   C ≥ 95 % of the shared tokens cached (one snapshot serves them all).
# fraction: on an 80 GB card the default --memory-fraction 0.90 holds back
#   ≈ 7.9 GiB, more than the ≈ 6.5 GiB the bf16 35B-A3B gets for its pools
#   and transients. Is 0.95 safe (no driver OOM under load, `nvidia-smi`'s
#   peak under the card) and what does it buy?
#   D  --memory-fraction 0.95, 1,024 / 256 at c = 64 (as A);
#   E  on D's server, W1-like 512 x 1,024 / 128 at c = 256.
#   Prediction: ≈ +4 GiB for the pools: ≈ 50 running, c64 ≈ 2,000 output
#   tok/s; no OOM (the memory model predicts the transients; the
#   device's own use outside the pools is < 2 GiB).
# stripe: the H100 plan of session 27 set aside ≈ 4 GiB of transients for a
#   28,352-row solo stripe (auto: the whole prompt), more than the KV pool
#   and the GDN slots together (2.5 GiB). F: `--solo-stripe 8192` (the
#   transient of an 8,192-row step), 1,024 / 256 at c = 64, and the TTFT of
#   one 16k prompt alone after it; G: that 16k prompt with the default
#   (whole-prompt) stripe. Prediction: ≈ +2.5 GiB for the pools, a
#   higher lowered context, ≈ 40 running, c64 ≈ 1,800 output tok/s; the 16k
#   prompt's TTFT a few % slower than a whole-prompt stripe.
set -u
case "${1:-}" in check|serve|fraction|stripe) ;; *) echo "usage: $0 check|serve|fraction|stripe" >&2; exit 1 ;; esac
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next
B=$T/h/headroom
S=/tmp/next-$1; mkdir -p "$S"
SECONDS=0
unpack() { mkdir -p $T; [ -x $B ] || tar -xJf .devbin/next/bins.tar.xz -C $T; }
# A fresh server with FLAGS, then one `bench serve` per LOAD ("NAME ARGS..."),
# each reported; the server's memory metrics after the last; then stopped.
serve_loads() { # "SERVE FLAGS" "NAME BENCH-ARGS..." ...
  local flags=$1; shift
  local first=${1%% *}
  # shellcheck disable=SC2086
  HEADROOM_DECODE_STATS=1 $B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8920 $flags \
    > "$S/serve-$first.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$S/serve-$first.log" && break; sleep 0.5; done
  echo "--- serve $flags"
  grep -E "serve on cuda|lowered" "$S/serve-$first.log" | cut -c1-900
  for load in "$@"; do
    local name=${load%% *} args=${load#* }
    # shellcheck disable=SC2086
    timeout 170 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name.json" $args > "$S/$name.txt" 2>&1
    echo "$name: $(grep -E 'output tok/s' "$S/$name.txt" | head -1)"
    grep -E "^ttft|^itl|cached" "$S/$name.txt" | head -4
  done
  grep "decode stats" "$S/serve-$first.log" | tail -2 | cut -c1-400
  grep -iE "out of memory" "$S/serve-$first.log" | head -3
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8920/metrics').read().decode())" 2>/dev/null \
    | grep -E "^headroom_device_memory|^headroom_preemptions" || true
  kill -TERM $sp; wait $sp; echo "exit $? t=$SECONDS"
}
C64="--concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256"
case "$1" in
check)
  bash bench/gpu/check_all.sh .devbin/all 480 2>&1 | tail -60 | tee "$O/check-log.txt"
  tar -C "$O" -czf "$O/check-all.tar.gz" check-all && rm -rf "$O/check-all"
  exit
  ;;
serve)
  unpack
  run() {
    serve_loads "" "A $C64" \
      "C --concurrency 64 --requests 256 --prompt-len 4608 --shared-prefix-len 4096 --max-tokens 128"
    serve_loads "--prefix-cache-state-slots 16" "B $C64"
  } ;;
fraction)
  unpack
  ( while sleep 1; do nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; done \
      > "$S/smi.csv" ) &
  smi=$!
  run() {
    serve_loads "--memory-fraction 0.95" "D $C64" \
      "E --concurrency 256 --requests 512 --prompt-len 1024 --max-tokens 128"
    kill $smi
    echo "nvidia-smi peak used: $(sort -n "$S/smi.csv" | tail -1)"
  } ;;
stripe)
  unpack
  L16="--concurrency 1 --requests 2 --prompt-len 16384 --max-tokens 1"
  run() {
    serve_loads "--solo-stripe 8192" "F $C64" "F16k $L16"
    serve_loads "" "G16k $L16"
  } ;;
esac
{ echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"; run; } 2>&1 | tee "$O/$1-log.txt"
tar -C "$S" -czf "$O/$1.tar.gz" .
