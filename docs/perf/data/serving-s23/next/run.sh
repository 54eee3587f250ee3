#!/usr/bin/env bash
# Session 23's prepared H200 calls: the step overlap (session 22) and CUDA
# graphs of decode steps (session 23), both built and CPU-tested, neither
# yet run on a GPU. Build first: bash docs/perf/data/serving-s23/next/build.sh
# (binaries in .devbin/s23next/bins.tar.xz: h/headroom, h/backend_ops-*,
# h/graphs-*, h/cuda_overlap-*, h/cuda_graphs-*, h/cuda_engine-*).
# Usage: run.sh tests|engine|ttft|serve (one device call each, each under
# 600 s). `engine` is bench/gpu/check_engine.sh (the engine's GPU tests,
# the overlap's, the graphs' with a memcheck of a replay, `generate`).
# 1. tests: sample_later / read_drawn / embed_drawn against sample and
#    embed (backend_ops, memcheck of the first); recorded steps below the
#    engine (graphs: the eager bits, a refused read, and the host's cost
#    of a recorded 300-launch step against eager launches, printed); the
#    engine's tokens with the overlap on and off; logits with graphs on
#    and off, to the bit;
# 2. ttft: batch-1 decode, bf16 after 2k and 32k, in four arms alternated
#    twice: overlap off / on x graphs off / on; one run each arm with
#    HEADROOM_DECODE_STATS=1 (host queue per step, graph launches); FP8
#    after 2k plain and with both;
# 3. serve: fresh servers, default flags but the two settings: W1 and a
#    256-sequence decode load, plain / overlap / overlap + graphs.
# Predictions: the overlap +2-3 % at batch 1 (the GPU's 75 us idle a step
#   gone), +1-2 % at 64-256 running. Graphs: the host's queue time per
#   batch-1 step falls (capture appends a node instead of submitting a
#   launch: guess 1.9 -> 1.0-1.4 ms) but the step's wall time moves only
#   with the overlap on (without it the GPU waits for each capture: graphs
#   alone may be slower), and at today's GPU time (2.5 ms > host) by
#   about 0 to +2 % (the GPU's gaps between kernels inside a graph).
# If the overlap wins everywhere: StepOverlap::Auto -> on for CUDA. Graphs:
#   auto -> on only where both on beats the overlap alone.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s23next; mkdir -p $T && tar -xJf .devbin/s23next/bins.tar.xz -C $T
B=$T/h/headroom
OPS=$(ls $T/h/backend_ops-* | head -n1); OVL=$(ls $T/h/cuda_overlap-* | head -n1)
GRA=$(ls $T/h/cuda_graphs-* | head -n1); ENG=$(ls $T/h/cuda_engine-* | head -n1)
REC=$(ls $T/h/graphs-* | head -n1)
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
SECONDS=0
PART=${1:-all}
tests() {
echo "=== backend_ops (every op; the sampling ones cover the sample / sample_later split)"
timeout 300 $OPS --ignored --test-threads 1 2>&1 | grep -E "^test |test result|panicked" | tail -40
timeout 200 compute-sanitizer --tool memcheck $OPS --ignored tokens_drawn_for_later 2>&1 | tail -3
echo "=== graphs (recorded steps below the engine)"
timeout 200 $REC --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|round|Graph" | head -20
timeout 200 compute-sanitizer --tool memcheck $REC --ignored --exact recorded_embeddings_give_the_eager_bits_capture_after_capture 2>&1 | tail -3
echo "=== cuda_overlap"
timeout 200 $OVL --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|steps queued" | head
echo "=== cuda_graphs"
timeout 200 $GRA --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|GraphStats" | head -20
echo "t=$SECONDS"
}
ttft() { # MODEL OVERLAP GRAPHS LENGTHS STATS
  HEADROOM_DECODE_STATS=$5 timeout 200 $B bench ttft --backend cuda --synthetic $1 --lengths $4 \
    --iterations 1 --warmup 1 --decode 64 --step-overlap $2 --cuda-graphs $3 2>&1 |
    grep -E "tokens  TTFT|decode stats|graphs|Error|error" | tail -4 | cut -c1-900
}
decode() {
for round in 1 2; do
  for arm in "off off" "on off" "off on" "on on"; do
    echo "--- bf16 overlap/graphs $arm (round $round)"; ttft $M $arm 2048,32768 0
  done
done
for arm in "off off" "on off" "off on" "on on"; do echo "--- bf16 $arm stats"; ttft $M $arm 2048 1; done
for arm in "off off" "on on"; do echo "--- fp8 $arm"; ttft $M-fp8 $arm 2048 0; done
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
  grep -E "TTFT|ITL|preempt" "$O/$name.txt" | head -3
  curl -s http://127.0.0.1:8920/metrics | grep -E "^headroom_steps_queued_ahead_total|^headroom_preemptions_total"
  grep -iE "graph" "$O/serve-$name.log" | head -3
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
}
serving() {
serve_run w1-plain off off --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-overlap on off --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-both on on --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run c256-plain off off --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
serve_run c256-overlap on off --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
serve_run c256-both on on --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
}
{
case $PART in
  tests) tests ;;
  engine) OUT="$O" bash bench/gpu/check_engine.sh "$ENG" "$B" "$OVL" "$GRA" ;;
  ttft) decode ;;
  serve) serving ;;
  *) echo "run.sh: unknown part $PART (tests|engine|ttft|serve)"; exit 1 ;;
esac
} > "$O/log-$PART.txt" 2>&1
cat "$O/log-$PART.txt"
