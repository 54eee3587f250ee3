#!/usr/bin/env bash
# Session 22's prepared H200 calls (never run in session 22: no device was
# lent after its first call). Build first: bash docs/perf/data/serving-s22/next/build.sh
# (binaries in .devbin/s22next/bins.tar.xz: h/headroom, h/backend_ops-*, h/cuda_overlap-*,
# h/cuda_engine-*).
# Usage: run.sh tests|engine|ttft|serve (one device call each, each under 600 s;
# `run.sh all` for the four in one call when the limit allows). `engine`
# is bench/gpu/check_engine.sh: the engine's GPU tests (the plain step was
# refactored this session), the overlap's and `generate` end to end.
# 1. the CUDA pieces of the step overlap: sample_later / read_drawn /
#    embed_drawn against sample and embed (backend_ops), and the engine's
#    tokens with the overlap on and off (cuda_overlap), memcheck of the first;
# 2. batch-1 decode with --step-overlap off / on, alternated (off on off on),
#    bf16 after 2k and 32k, FP8 after 2k; one run each with
#    HEADROOM_DECODE_STATS=1 (the GPU's idle between steps should fall from
#    ~75 us to ~0);
# 3. fresh servers, default flags but --step-overlap: W1 off / on, and a
#    256-sequence decode load off / on.
# Prediction (session 22, call 1: the GPU idles 75 us of a 2.60 ms batch-1
# step, 295 us of 20.7 ms at 64 running, 680 us of 31.4 ms at 256): decode
# +2-3 % at batch 1, +1-2 % at 64-256 running; W1 +1-2 %; TTFT unchanged.
# If on wins everywhere: StepOverlap::Auto -> on for CUDA (overlap.rs).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s22next; mkdir -p $T && tar -xJf .devbin/s22next/bins.tar.xz -C $T
B=$T/h/headroom
OPS=$(ls $T/h/backend_ops-* | head -n1); OVL=$(ls $T/h/cuda_overlap-* | head -n1)
ENG=$(ls $T/h/cuda_engine-* | head -n1)
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
M=qwen3.6-35b-a3b
SECONDS=0
PART=${1:-all}
tests() {
echo "=== backend_ops (every op; the sampling ones cover the sample / sample_later split)"
timeout 300 $OPS --ignored --test-threads 1 2>&1 | grep -E "^test |test result|panicked" | tail -40
timeout 200 compute-sanitizer --tool memcheck $OPS --ignored tokens_drawn_for_later 2>&1 | tail -3
echo "=== cuda_overlap"
timeout 200 $OVL --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|steps queued" | head
echo "t=$SECONDS"
}
ttft() { # MODEL OVERLAP LENGTHS STATS
  HEADROOM_DECODE_STATS=$4 timeout 200 $B bench ttft --backend cuda --synthetic $1 --lengths $3 \
    --iterations 1 --warmup 1 --decode 64 --step-overlap $2 2>&1 | grep -E "tokens  TTFT|decode stats" | tail -3 | cut -c1-300
}
decode() {
for s in off on off on; do echo "--- bf16 $s"; ttft $M $s 2048,32768 0; done
for s in off on; do echo "--- bf16 $s stats"; ttft $M $s 2048 1; done
for s in off on; do echo "--- fp8 $s"; ttft $M-fp8 $s 2048 0; done
echo "t=$SECONDS"
}
serve_run() { # NAME OVERLAP ARGS...
  local name=$1 ov=$2; shift 2
  $B serve --backend cuda --synthetic $M --port 8920 --step-overlap $ov > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$name.log" && break; sleep 0.5; done
  timeout 200 $B bench serve --url http://127.0.0.1:8920 --json "$O/$name.json" "$@" > "$O/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$O/$name.txt" | head -1)"
  grep -E "TTFT|ITL|preempt" "$O/$name.txt" | head -3
  curl -s http://127.0.0.1:8920/metrics | grep -E "^headroom_steps_queued_ahead_total|^headroom_preemptions_total"
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
}
serving() {
serve_run w1-off off --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run w1-on on --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128
serve_run c256-off off --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
serve_run c256-on on --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
}
{
case $PART in
  tests) tests ;;
  engine) OUT="$O" bash bench/gpu/check_engine.sh "$ENG" "$B" "$OVL" ;;
  ttft) decode ;;
  serve) serving ;;
  all) tests; OUT="$O" bash bench/gpu/check_engine.sh "$ENG" "$B" "$OVL"; decode; serving ;;
  *) echo "run.sh: unknown part $PART (tests|engine|ttft|serve|all)"; exit 1 ;;
esac
} > "$O/log-$PART.txt" 2>&1
cat "$O/log-$PART.txt"
