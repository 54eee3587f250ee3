#!/usr/bin/env bash
# Prepared in session 29 for the next session with a GPU (any card; an H100
# is what came lately). Two modes, each under 600 s:
#   alloc  branch `splitalloc` (large blocks split from and merged back into
#          their driver segments) against main, on fresh servers with default
#          flags: what each has obtained from the device after a c = 256 load
#          (/metrics reserved against the live peak; nvidia-smi), the load's
#          throughput, a 32,000-token prompt alone; then the allocator-sensitive
#          GPU tests on the branch's binaries (graphs replay the eager bits,
#          the engine's invariance figures, backend_ops with its NaN-poisoned
#          pools, memcheck-free graph tests).
#   h200   main on the H200 (data/serving-s29/h200.sh): the whole suite and W1.
# Prediction (alloc; serving.md session 29, call 8): main's reserved − peak
#   after the load ≈ 3.7 GiB on the H100 (4.3 GiB above held); the branch's
#   < 1 GiB (a simulated trace of steps of varying rows: 28x → 1.15x the
#   peak; blocks under 1 MiB keep the exact-size pool); the same output
#   tok/s within ±2 % (≈ 0.1 ms more host work a step, 352 against 107 ns an
#   allocation and its free, hidden by the overlap; a driver free, which
#   synchronises, only when a request outgrows every free block); the same
#   32k TTFT; every test as on main (the known batch/chunk failure).
#   If it holds, merge the branch, then measure --memory-fraction 0.93-0.95
#   again (session 29: nvidia-smi 1.27 GiB under the card at 0.95 with the
#   exact-size cache).
# Build on the build machine (main checked out afterwards):
#   git checkout splitalloc && cargo build --release -p headroom &&
#     cp $CARGO_TARGET_DIR/release/headroom /tmp/headroom-split &&
#     bash bench/gpu/pack_tests.sh .devbin/split && git checkout main
#   EXTRA_BINS="headroom-split=/tmp/headroom-split" bash bench/gpu/pack_bins.sh .devbin/next
#   (h200 also needs: bash bench/gpu/pack_tests.sh .devbin/all)
# carry [".devbin/next", ".devbin/split"] (alloc) or [".devbin/next", ".devbin/all"] (h200).
set -u
case "${1:-}" in alloc|h200) ;; *) echo "usage: $0 alloc|h200" >&2; exit 1 ;; esac
O=${OUT:-/tmp/out}; mkdir -p "$O"
if [ "$1" = h200 ]; then exec bash docs/perf/data/serving-s29/h200.sh; fi
T=/tmp/next; mkdir -p $T; tar -xJf .devbin/next/bins.tar.xz -C $T
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
SECONDS=0
metrics() {
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8950/metrics').read().decode())" \
    | grep -E "^headroom_device_memory"
}
{
echo "card: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
for b in headroom headroom-split; do
  $T/h/$b serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8950 > "$O/serve-$b.log" 2>&1 &
  sp=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$O/serve-$b.log" && break; sleep 0.5; done
  echo "--- $b (t=$SECONDS)"
  grep -E "serve on cuda" "$O/serve-$b.log" | grep -oE "solo_stripe [0-9]+; up to [0-9]+ running, context [0-9]+"
  (while sleep 0.5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done > "$O/smi-$b.txt") &
  smi=$!
  timeout 120 $T/h/headroom bench serve --url http://127.0.0.1:8950 --json "$O/c256-$b.json" \
    --concurrency 256 --requests 512 --prompt-len 1024 --max-tokens 128 > "$O/c256-$b.txt" 2>&1
  kill $smi
  grep -E "output tok/s|^server" "$O/c256-$b.txt" | cut -c1-260
  metrics
  echo "smi peak (MiB): $(sort -n "$O/smi-$b.txt" | tail -1)"
  timeout 60 $T/h/headroom bench serve --url http://127.0.0.1:8950 \
    --concurrency 1 --requests 3 --prompt-len 32000 --max-tokens 1 > "$O/l32-$b.txt" 2>&1
  grep -E "^ttft" "$O/l32-$b.txt"
  kill -TERM $sp; wait $sp
done
X=$(mktemp -d); tar -xJf .devbin/split/bins.tar.xz -C $X
at=$(cat .devbin/split/built-at); [ -e "$at" ] || { mkdir -p "$(dirname "$at")"; ln -s "$PWD" "$at"; }
for t in backend_ops graphs cuda_graphs cuda_engine cuda_overlap; do
  left=$((560 - SECONDS)); [ $left -gt 20 ] || { echo "--- $t: out of time"; continue; }
  echo "--- $t (split, t=$SECONDS)"
  timeout $left $X/t/$t --ignored --test-threads 1 > "$O/test-$t.txt" 2>&1
  echo "rc $?"; grep -E "test result|^test .*FAILED|panicked at" "$O/test-$t.txt" | head -6
done
} 2>&1 | tee "$O/alloc-log.txt"
