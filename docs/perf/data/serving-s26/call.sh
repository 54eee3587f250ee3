#!/usr/bin/env bash
# Session 26's device calls (build: ../serving-s25/next/build.sh, packed into
# .devbin/s25a; carry it). Session 25's call 1 split in two so each fits one
# 600 s command on whichever card comes (H100 or H200):
#   bash docs/perf/data/serving-s26/call.sh tests   # call A
#   bash docs/perf/data/serving-s26/call.sh serve   # call B, on the warm machine
# On a card with no committed qualification (the H100: only qualifications/h200
# is embedded), call A first runs `headroom qualify` (bench/gpu/qualify_h200.sh,
# which is not H200-specific) and every later command applies its entry
# through HEADROOM_QUALIFICATIONS, so `auto` is measured as a user would get it
# after qualifying. The predictions are session 25's (call1.sh beside build.sh):
# graph tests agree to the bit with the kernel-node hash; graphs on +3-4 %
# decode; without updates within 1 % of on.
set -u
PART=${1:?usage: call.sh tests|serve}
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s26; mkdir -p $T; [ -x $T/h/headroom ] || tar -xJf .devbin/s25a/bins.tar.xz -C $T
B=$T/h/headroom; GRA=$T/h/cuda_graphs
M=qwen3.6-35b-a3b
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $CARD"
Q=/tmp/s26q
case "$CARD" in *H200*) ;; *) [ -d $Q ] && export HEADROOM_QUALIFICATIONS=$Q ;; esac
SECONDS=0
ttft() { # GRAPHS LENGTHS [BINARY]
  timeout 200 ${3:-$B} bench ttft --backend cuda --synthetic $M --lengths $2 \
    --iterations 1 --warmup 1 --decode 64 --step-overlap on --cuda-graphs $1 2>&1 |
    grep -E "tokens  TTFT|graphs|Error|error" | grep -v "^engine" | tail -3 | cut -c1-600
}
S=/tmp/s26s; mkdir -p $S   # serve logs and JSON, packed into $O/serve.tar.gz
serve_run() { # NAME GRAPHS ARGS...
  local name=$1 gr=$2 O=$S; shift 2
  $B serve --backend cuda --synthetic $M --port 8920 --cuda-graphs $gr > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
  grep -E "pool|slots|attention" "$O/serve-$name.log" | head -4 | cut -c1-300
  timeout 150 $B bench serve --url http://127.0.0.1:8920 --json "$O/$name.json" "$@" > "$O/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$O/$name.txt" | head -1)"
  grep -E "TTFT|ITL|completed" "$O/$name.txt" | head -3
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
}
if [ "$PART" = tests ]; then {
case "$CARD" in *H200*) ;; *)
  echo "=== qualify (no committed entry for this card)"
  mkdir -p $Q
  OUT=$Q timeout 300 bash bench/gpu/qualify_h200.sh $B 2048,8192,32768 2>&1 | grep -vE "^ *[0-9]+ tokens" | tail -15
  tar -C $Q -czf "$O/qualify.tar.gz" .
  export HEADROOM_QUALIFICATIONS=$Q
  echo "t=$SECONDS" ;;
esac
echo "=== cuda_graphs (engine)"
timeout 300 $GRA --ignored --nocapture --test-threads 1 > "$O/graphs-tests.txt" 2>&1; rc=$?
grep -E "^test |test result|panicked|GraphStats|differing" "$O/graphs-tests.txt" | cut -c1-600 | head -40
echo "graph tests rc=$rc t=$SECONDS"
echo "=== memcheck, a lone decode's graph replay"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 $GRA --ignored --nocapture \
  --test-threads 1 cuda_a_lone_decode_updates_one_graph 2>&1 | tail -n 6 | tee "$O/graphs-memcheck.txt"
echo "t=$SECONDS"
for round in 1 2; do
  for g in off on; do echo "--- graphs $g"; ttft $g 2048,32768; done
  echo "--- graphs on, no updates"; ttft on 2048,32768 $T/h/headroom-noupd
done
echo "t=$SECONDS"
} 2>&1 | tee "$O/log-tests.txt"; fi
if [ "$PART" = serve ]; then {
for g in off on; do serve_run c16-graphs-$g $g --concurrency 16 --requests 64 --prompt-len 1024 --max-tokens 256; done
for g in off on; do serve_run c256-graphs-$g $g --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160; done
} 2>&1 | tee "$O/log-serve.txt"; tar -C $S -czf "$O/serve.tar.gz" .; fi
