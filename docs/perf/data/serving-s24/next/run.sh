#!/usr/bin/env bash
# Session 24's H200 calls (build first: bash docs/perf/data/serving-s24/next/build.sh,
# carry .devbin/s24next). Usage: run.sh graphs|call2|serve.
# graphs: whether updating a graph still running waits for it (the graphs
#   test binary, a_step_never_updates_the_graph_still_running, printed), the
#   engine's graph tests (logits to the bit: the lone composed-route decode
#   differed in session 23), and batch-1 decode of the 35B after 2k with the
#   overlap on, graphs off / on alternated twice, HEADROOM_DECODE_STATS once each.
# Prediction: with two graphs a shape (never updating the one launched last)
#   the GPU's ~950 us idle a step with graphs (session 23 call 4) is gone and
#   graphs + overlap >= overlap alone (about +0-4 %: the GPU's gaps between
#   kernels inside a graph); the lone decode's logits equal (cuBLAS's classic
#   handle now has a fixed workspace).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s24next; mkdir -p $T && tar -xJf .devbin/s24next/bins.tar.xz -C $T
B=$T/h/headroom
OPS=$(ls $T/h/backend_ops-* | head -n1); OVL=$(ls $T/h/cuda_overlap-* | head -n1)
GRA=$(ls $T/h/cuda_graphs-* | head -n1); ENG=$(ls $T/h/cuda_engine-* | head -n1)
REC=$(ls $T/h/graphs-* | head -n1)
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
SECONDS=0
PART=${1:-graphs}
ttft() { # MODEL OVERLAP GRAPHS LENGTHS STATS
  HEADROOM_DECODE_STATS=$5 timeout 200 $B bench ttft --backend cuda --synthetic $1 --lengths $4 \
    --iterations 1 --warmup 1 --decode 64 --step-overlap $2 --cuda-graphs $3 2>&1 |
    grep -E "tokens  TTFT|decode stats|graphs|Error|error" | tail -3 | cut -c1-1200
}
graphs() {
echo "=== graphs (below the engine)"
timeout 200 $REC --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|round|a step of|Graph" | head -20
echo "=== cuda_graphs (engine)"
timeout 200 $GRA --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|GraphStats|left|right" | head -24
echo "t=$SECONDS"
for round in 1 2; do
  for g in off on; do echo "--- bf16 overlap on, graphs $g (round $round)"; ttft $M on $g 2048 0; done
done
for g in off on; do echo "--- bf16 overlap on, graphs $g, stats"; ttft $M on $g 2048 1; done
echo "t=$SECONDS"
}
call2() {
echo "=== graphs (below the engine)"
timeout 200 $REC --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|a step of|Graph" | cut -c1-600 | head -20
echo "=== initcheck: the lone composed-route decode (graphs off, then on)"
timeout 300 compute-sanitizer --tool initcheck --error-exitcode 3 $GRA --ignored --nocapture --test-threads 1 \
  cuda_a_lone_decode_updates_one_graph > "$O/initcheck.txt" 2>&1; echo "initcheck rc=$?"
grep -E "Uninitialized|ERROR SUMMARY|at 0x|by thread|Host Frame|in .*kernel|^=========     " "$O/initcheck.txt" | head -30 | cut -c1-300
echo "t=$SECONDS"
for round in 1 2; do
  for g in off on; do echo "--- bf16 overlap on, graphs $g (round $round)"; ttft $M on $g 2048,32768 0 | grep -v "^engine"; done
done
for g in off on; do echo "--- bf16 overlap on, graphs $g, stats"; ttft $M on $g 2048 1 | grep -v "^engine"; done
echo "t=$SECONDS"
echo "=== check_engine.sh"
OUT="$O/engine" timeout 420 bash bench/gpu/check_engine.sh "$ENG" "$B" "$OVL" "$GRA" > "$O/engine.txt" 2>&1; echo "check_engine rc=$?"
grep -E "FAILED|passed|failed|test result|lone decode|GraphStats|ERROR SUMMARY" "$O/engine.txt" | cut -c1-300 | head -30
echo "t=$SECONDS"
}
serve_run() { # NAME OVERLAP GRAPHS ARGS...
  local name=$1 ov=$2 gr=$3; shift 3
  $B serve --backend cuda --synthetic $M --port 8920 --step-overlap $ov --cuda-graphs $gr \
    > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
  timeout 150 $B bench serve --url http://127.0.0.1:8920 --json "$O/$name.json" "$@" > "$O/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$O/$name.txt" | head -1)"
  grep -E "TTFT|ITL|preempt|completed" "$O/$name.txt" | head -3
  curl -s http://127.0.0.1:8920/metrics | grep -E "^headroom_steps_queued_ahead_total|^headroom_preemptions_total"
  grep -iE "graphs|overlap" "$O/serve-$name.log" | head -2 | cut -c1-400
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
}
serving() {
serve_run c256-overlap auto off --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
serve_run c256-both auto on --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
serve_run c16-overlap auto off --concurrency 16 --requests 64 --prompt-len 1024 --max-tokens 256
serve_run c16-both auto on --concurrency 16 --requests 64 --prompt-len 1024 --max-tokens 256
serve_run w1-overlap auto off --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-both auto on --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
for g in off on; do echo "--- bf16 after 32k, overlap on, graphs $g"; ttft $M on $g 32768 0 | grep -v "^engine"; done
}
{
case $PART in
  serve) serving ;;
  call2) call2 ;;
  graphs) graphs ;;
  engine) OUT="$O" bash bench/gpu/check_engine.sh "$ENG" "$B" "$OVL" "$GRA" ;;
  *) echo "run.sh: unknown part $PART (graphs|engine)"; exit 1 ;;
esac
} > "$O/log-$PART.txt" 2>&1
tail -c 11000 "$O/log-$PART.txt"
