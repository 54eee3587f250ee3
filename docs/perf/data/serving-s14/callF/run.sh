#!/usr/bin/env bash
# Session 14 call F: W1 on the FP8 preset, before (s14ab, HEADROOM_GDN_FORM=wu = main
# at session start + the 16-byte gather) and after (main b2e8183), one machine; then
# W3 on main (BF16, default flags).
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/c14f; mkdir -p $B && tar -xJf .devbin/c14f/bins.tar.xz -C $B
R=$O/log.txt
serve() {  # name bin port model
  HEADROOM_GDN_FORM=wu $2 serve --backend cuda --synthetic $4 --port $3 > "$O/serve-$1.log" 2>&1 &
  SP=$!
  for i in $(seq 1 400); do grep -q "listening on" "$O/serve-$1.log" && break; sleep 0.5; done
}
{
port=8600
for b in after before; do
  port=$((port+1)); bin=$B/headroom; [ $b = before ] && bin=$B/headroom-before
  echo "=== W1 fp8 $b t=$(el)"
  serve fp8-$b $bin $port qwen3.6-35b-a3b-fp8
  echo "ready t=$(el)"
  timeout 90 $bin bench serve --url http://127.0.0.1:$port --concurrency 512 --requests 1000 \
      --prompt-len 1024 --max-tokens 128 --json "$O/w1-fp8-$b.json" > "$O/w1-fp8-$b.txt" 2>&1; echo "w1 rc $?"
  grep -E "requests at|output tok/s" "$O/w1-fp8-$b.txt"
  kill -TERM $SP; wait $SP
done
if [ $(el) -lt 260 ]; then
  echo "=== W3 main t=$(el)"
  serve w3 $B/headroom 8610 qwen3.6-35b-a3b
  timeout 60 $B/headroom bench serve --url http://127.0.0.1:8610 --concurrency 16 --requests 16 --prompt-len 32768 \
      --max-tokens 256 --json "$O/w3.json" > "$O/w3.txt" 2>&1; echo "w3 rc $?"
  grep -iE "requests at|output tok/s|^ttft|^itl" "$O/w3.txt" | head -6
  kill -TERM $SP; wait $SP
fi
echo "done t=$(el)"
} > "$R" 2>&1
cat "$R"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz ! -name log.txt -delete
