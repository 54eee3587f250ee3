#!/usr/bin/env bash
# Session 29, call 8: where the memory nvidia-smi counts beyond the engine's
# live peak goes (4.5-6.2 GiB on the H100 in calls 2 and 6). main c646ddc:
# loading's cached blocks are released before the pools are sized, and
# /metrics gives each rank's reserved bytes (held + the allocator's cache).
#   1. backend_ops' new GPU test (reserved = held after a release; a freed
#      buffer stays reserved until released);
#   2. serve, default flags: /metrics and nvidia-smi after start-up (the
#      warm-up has run), then after 512 x 1,024 / 128 at c = 256.
# Prediction: after start-up reserved - held < 1 GiB (the warm-up's
# transients cached); after the load reserved - peak 1-3 GiB (blocks of the
# many step shapes cached); nvidia-smi - reserved 1.5-2.5 GiB (the CUDA
# context, cuBLAS, the modules, graphs).
# Build: bash bench/gpu/pack_bins.sh .devbin/next headroom-cuda:backend_ops;
# carry [".devbin/next"].
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/m; mkdir -p $T; tar -xJf .devbin/next/bins.tar.xz -C $T
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
{
echo "card: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader)"
timeout 60 $T/h/backend_ops --ignored freed_buffers_stay_reserved 2>&1 | grep -E "test result|panicked|FAILED"
$T/h/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8940 > "$O/serve.log" 2>&1 &
sp=$!
for _ in $(seq 1 300); do grep -q "listening on" "$O/serve.log" && break; sleep 0.5; done
grep -E "serve on cuda" "$O/serve.log" | grep -oE "up to [0-9]+ running, context [0-9]+|KV pool [0-9]+ blocks"
mem() {
  echo "-- $1: smi $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8940/metrics').read().decode())" \
    | grep -E "^headroom_device_memory"
}
mem "after start-up"
(while sleep 0.5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done > "$O/smi.txt") &
smi=$!
timeout 120 $T/h/headroom bench serve --url http://127.0.0.1:8940 --concurrency 256 --requests 512 \
  --prompt-len 1024 --max-tokens 128 > "$O/c256.txt" 2>&1
kill $smi
grep -E "output tok/s" "$O/c256.txt" | head -1 | cut -c1-120
mem "after the load"
echo "smi peak during the load (MiB): $(sort -n "$O/smi.txt" | tail -1)"
kill -TERM $sp; wait $sp
} 2>&1 | tee "$O/memory-log.txt"
