#!/usr/bin/env bash
# Session 14 call B: W1 (512 c, 1000 x 1024/128) A/B over the GDN form (scratch env).
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/c14; mkdir -p $B; [ -x $B/headroom ] || tar -xJf .devbin/c14/bins.tar.xz -C $B
R=$O/log.txt
port=8300
{
for spec in ${SPECS:-wu:0 lite:0 fusedwgmma:5 fused:5}; do
  f=${spec%%:*}; m=${spec##*:}; port=$((port+1))
  echo "=== W1 $f min $m t=$(el)"
  HEADROOM_GDN_FORM=$f HEADROOM_GDN_FUSED_MIN=$m $B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port $port > "$O/serve-$f-$m.log" 2>&1 &
  SP=$!
  for i in $(seq 1 240); do grep -q "listening on" "$O/serve-$f-$m.log" && break; sleep 0.5; done
  timeout 90 $B/headroom bench serve --url http://127.0.0.1:$port --concurrency 512 --requests 1000 \
      --prompt-len 1024 --max-tokens 128 --json "$O/w1-$f-$m.json" > "$O/w1-$f-$m.txt" 2>&1; echo "w1 rc $?"
  grep -E "requests at|output tok/s|TTFT|ITL" "$O/w1-$f-$m.txt" | head -8
  kill -TERM $SP; wait $SP
done
echo "done t=$(el)"
} > "$R" 2>&1
cat "$R"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz ! -name log.txt -delete
