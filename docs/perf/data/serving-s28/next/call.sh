#!/usr/bin/env bash
# Prepared in session 28 for the next session with a GPU (an H100 comes
# first). Build on the build machine:
#   bash bench/gpu/pack_tests.sh .devbin/all     # the GPU test binaries
#   bash bench/gpu/pack_bins.sh .devbin/next     # the release headroom
# carry [".devbin/all", ".devbin/next"]; two calls, each under 600 s:
#   bash docs/perf/data/serving-s28/next/call.sh check   (check_all, 480 s)
#   bash docs/perf/data/serving-s28/next/call.sh serve   (runs A-C below)
#   bash docs/perf/data/serving-s28/next/call.sh fraction (runs D-E below)
#   bash docs/perf/data/serving-s28/next/call.sh stripe   (run F below)
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
#      c = 64) with the default slots.
#   Prediction (serving.md session 28): A 2 snapshot slots, ≈ 26 running,
#   1,400-1,600 output tok/s; B 16 slots, 17 running, ≈ 1,081 (session 27);
#   C ≥ 95 % of the shared tokens cached (one snapshot serves them all).
# fraction: on an 80 GB card the default --memory-fraction 0.90 holds back
#   ≈ 7.9 GiB, more than the ≈ 6.5 GiB the bf16 35B-A3B gets for its pools
#   and transients. Is 0.95 safe (no driver OOM under load, `nvidia-smi`'s
#   peak under the card) and what does it buy?
#   D  --memory-fraction 0.95, 1,024 / 256 at c = 64 (as A);
#   E  --memory-fraction 0.95, W1-like 512 x 1,024 / 128 at c = 256.
#   Prediction: ≈ +4 GiB for the pools: ≈ 50 running, c64 ≈ 2,000 output
#   tok/s; no OOM (the memory model predicts the transients; the
#   device's own use outside the pools is < 2 GiB).
# stripe: the H100 plan of session 27 set aside ≈ 4 GiB of transients for a
#   28,352-row solo stripe (auto: the whole prompt), more than the KV pool
#   and the GDN slots together (2.5 GiB). F: `--solo-stripe 8192` (the
#   transient of an 8,192-row step), 1,024 / 256 at c = 64, and the TTFT of
#   one 16k prompt alone after it. Prediction: ≈ +2.5 GiB for the pools, a
#   higher lowered context, ≈ 40 running, c64 ≈ 1,800 output tok/s; the 16k
#   prompt's TTFT a few % slower than a whole-prompt stripe.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=/tmp/kcache
case "${1:-}" in
check)
  bash bench/gpu/check_all.sh .devbin/all 480 2>&1 | tail -60 | tee "$O/check-log.txt"
  tar -C "$O" -czf "$O/check-all.tar.gz" check-all && rm -rf "$O/check-all"
  ;;
serve)
  T=/tmp/next; mkdir -p $T; [ -x $T/h/headroom ] || tar -xJf .devbin/next/bins.tar.xz -C $T
  B=$T/h/headroom
  S=/tmp/next-s; mkdir -p $S
  SECONDS=0
  run() { # NAME "SERVE FLAGS" BENCH ARGS...
    local name=$1 flags=$2; shift 2
    # shellcheck disable=SC2086
    HEADROOM_DECODE_STATS=1 $B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8920 $flags \
      > "$S/serve-$name.log" 2>&1 &
    local sp=$!
    for _ in $(seq 1 600); do grep -q "listening on" "$S/serve-$name.log" && break; sleep 0.5; done
    grep -E "serve on cuda|lowered" "$S/serve-$name.log" | cut -c1-900
    timeout 150 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name.json" "$@" > "$S/$name.txt" 2>&1
    echo "$name: $(grep -E 'output tok/s' "$S/$name.txt" | head -1)"
    grep -E "^ttft|^itl|cached" "$S/$name.txt" | head -4
    grep "decode stats" "$S/serve-$name.log" | tail -2 | cut -c1-400
    python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8920/metrics').read().decode())" \
      | grep -E "^headroom_device_memory|^headroom_requests_running|^headroom_preemptions" || true
    kill -TERM $sp; wait $sp
    echo "t=$SECONDS"
  }
  {
  echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  run A "" --concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256
  run B "--prefix-cache-state-slots 16" --concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256
  run C "" --concurrency 64 --requests 256 --prompt-len 4608 --shared-prefix-len 4096 --max-tokens 128
  } 2>&1 | tee "$O/serve-log.txt"
  tar -C $S -czf "$O/serve.tar.gz" .
  ;;
fraction)
  T=/tmp/next; mkdir -p $T; [ -x $T/h/headroom ] || tar -xJf .devbin/next/bins.tar.xz -C $T
  B=$T/h/headroom
  S=/tmp/next-f; mkdir -p $S
  SECONDS=0
  ( while sleep 1; do nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader; done \
      > "$S/smi.csv" ) &
  smi=$!
  run() { # NAME "SERVE FLAGS" BENCH ARGS...
    local name=$1 flags=$2; shift 2
    # shellcheck disable=SC2086
    $B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8920 $flags > "$S/serve-$name.log" 2>&1 &
    local sp=$!
    for _ in $(seq 1 600); do grep -q "listening on" "$S/serve-$name.log" && break; sleep 0.5; done
    grep -E "serve on cuda|lowered" "$S/serve-$name.log" | cut -c1-900
    timeout 170 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name.json" "$@" > "$S/$name.txt" 2>&1
    echo "$name: $(grep -E 'output tok/s' "$S/$name.txt" | head -1)"
    grep -iE "out of memory|error" "$S/serve-$name.log" | head -3
    python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8920/metrics').read().decode())" \
      | grep -E "^headroom_device_memory|^headroom_requests_running|^headroom_preemptions" || true
    kill -TERM $sp; wait $sp; echo "exit $? t=$SECONDS"
  }
  {
  echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  run D "--memory-fraction 0.95" --concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256
  run E "--memory-fraction 0.95" --concurrency 256 --requests 512 --prompt-len 1024 --max-tokens 128
  kill $smi
  echo "nvidia-smi peak used: $(sort -n "$S/smi.csv" | tail -1)"
  } 2>&1 | tee "$O/fraction-log.txt"
  tar -C $S -czf "$O/fraction.tar.gz" .
  ;;
stripe)
  T=/tmp/next; mkdir -p $T; [ -x $T/h/headroom ] || tar -xJf .devbin/next/bins.tar.xz -C $T
  B=$T/h/headroom
  S=/tmp/next-st; mkdir -p $S
  SECONDS=0
  {
  echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  for flags in "--solo-stripe 8192" ""; do
    name=F${flags:+-8192}
    # shellcheck disable=SC2086
    $B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8920 $flags > "$S/serve-$name.log" 2>&1 &
    sp=$!
    for _ in $(seq 1 600); do grep -q "listening on" "$S/serve-$name.log" && break; sleep 0.5; done
    grep -E "serve on cuda|lowered" "$S/serve-$name.log" | cut -c1-900
    if [ -n "$flags" ]; then
      timeout 150 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name-c64.json" --concurrency 64 \
        --requests 64 --prompt-len 1024 --max-tokens 256 > "$S/$name-c64.txt" 2>&1
      echo "$name c64: $(grep -E 'output tok/s' "$S/$name-c64.txt" | head -1)"
    fi
    timeout 60 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name-16k.json" --concurrency 1 \
      --requests 2 --prompt-len 16384 --max-tokens 1 > "$S/$name-16k.txt" 2>&1
    echo "$name 16k alone: $(grep -E '^ttft' "$S/$name-16k.txt" | head -1)"
    kill -TERM $sp; wait $sp; echo "t=$SECONDS"
  done
  } 2>&1 | tee "$O/stripe-log.txt"
  tar -C $S -czf "$O/stripe.tar.gz" .
  ;;
*) echo "usage: $0 check|serve|fraction|stripe" >&2; exit 1 ;;
esac
