#!/usr/bin/env bash
# Session 16, call 4: where the bars stand on main b6c092c (session 15's attention + this session's
# Ws scheduler), one machine. Binaries: .devbin/s16c (call 3's "after" = main b6c092c).
# (1) batch-1 TTFT and decode, bf16 and FP8 presets (bench ttft --lengths 2048,32768 --decode 64);
# (2) one default bf16 server: W3 (16 x 32,768 / 256 at once), then W2's first 100 s
#     (400 x 1,000 / 2,000, c = 200); (3) a default FP8 server: W1 (1,000 x 1,024 / 128, c = 512).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
B=/tmp/s16c; mkdir -p $B && tar -xJf .devbin/s16c/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
serve_wait() { for _ in $(seq 1 600); do grep -q "listening on" "$1" && return 0; sleep 0.5; done; return 1; }
{
echo "=== (1) bench ttft --decode 64"
for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
  timeout 240 $B/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --iterations 3 --decode 64 \
    --json "$O/ttft-$m.json" > "$O/ttft-$m.txt" 2>&1; echo "ttft $m rc $?"
  grep -iE "TTFT|decode" "$O/ttft-$m.txt" | head -6
done
echo "=== (2) W3, then W2's first 100 s (bf16, default flags)"
$B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8801 > "$O/serve-bf16.log" 2>&1 &
SP=$!; serve_wait "$O/serve-bf16.log" || echo "bf16 server did not start"
timeout 90 $B/headroom bench serve --url http://127.0.0.1:8801 --concurrency 16 --requests 16 --prompt-len 32768 \
  --max-tokens 256 --json "$O/w3.json" > "$O/w3.txt" 2>&1; echo "w3 rc $?"
grep -iE "completed|output tok/s|ttft|preempt" "$O/w3.txt" | head -6
timeout 130 $B/headroom bench serve --url http://127.0.0.1:8801 --concurrency 200 --requests 400 --prompt-len 1000 \
  --max-tokens 2000 --time-limit-s 100 --json "$O/w2.json" > "$O/w2.txt" 2>&1; echo "w2 rc $?"
grep -iE "completed|output tok/s|itl|preempt" "$O/w2.txt" | head -6
kill -TERM $SP; wait $SP
echo "=== (3) W1 on the FP8 preset"
$B/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8802 > "$O/serve-fp8.log" 2>&1 &
SP=$!; serve_wait "$O/serve-fp8.log" || echo "fp8 server did not start"
timeout 120 $B/headroom bench serve --url http://127.0.0.1:8802 --concurrency 512 --requests 1000 --prompt-len 1024 \
  --max-tokens 128 --json "$O/w1-fp8.json" > "$O/w1-fp8.txt" 2>&1; echo "w1 fp8 rc $?"
grep -iE "output tok/s|ttft|itl" "$O/w1-fp8.txt" | head -4
kill -TERM $SP; wait $SP
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
