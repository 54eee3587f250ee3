#!/usr/bin/env bash
# Prepared for the next session with a GPU (build on the build machine:
# bash bench/gpu/pack_bins.sh .devbin/next; carry .devbin/next), one call
# on whichever card comes:
# 1. A card with no committed qualification (an H100 now comes first):
#    `headroom qualify` (bench/gpu/qualify_h200.sh is not H200-specific) and
#    `doctor`; its entry is applied to what follows (HEADROOM_QUALIFICATIONS)
#    and is to be committed under qualifications/<card>/ with its report.
# 2. Issue 23's step bars with CUDA graphs on (the default since session 26),
#    read from the engine (HEADROOM_DECODE_STATS=1): batch 1 after 2k and
#    32k, and a server at 64 and 256 running (1,024 / 256 and 1,024 / 160).
#    Prediction (H200): batch 1 ≈ 416-421 / 390-393 tok/s; at 256 running
#    the step ≈ 30 ms of GPU (session 22: a 30.7 ms span), the host's queue
#    time a capture of ≈ 300 launches and an update (≈ 0.5 ms, ≈ 2 µs a
#    sequence: the ≤ 5 µs and ≤ 15 % host bars met) and the step still above
#    the 20 ms bar (the expert weights and the f32 GDN state the checkpoint
#    asks for are ≈ 20 ms of bytes at 256 rows).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/next; mkdir -p $T; [ -x $T/h/headroom ] || tar -xJf .devbin/next/bins.tar.xz -C $T
B=$T/h/headroom
M=qwen3.6-35b-a3b
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
S=/tmp/next-s; mkdir -p $S
SECONDS=0
serve_run() { # NAME ARGS...
  local name=$1; shift
  HEADROOM_DECODE_STATS=1 $B serve --backend cuda --synthetic $M --port 8920 > "$S/serve-$name.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$S/serve-$name.log" && break; sleep 0.5; done
  timeout 150 $B bench serve --url http://127.0.0.1:8920 --json "$S/$name.json" "$@" > "$S/$name.txt" 2>&1
  echo "$name: $(grep -E 'output tok/s' "$S/$name.txt" | head -1)"
  grep -E "^itl" "$S/$name.txt"
  grep "decode stats" "$S/serve-$name.log" | tail -3 | cut -c1-500
  kill -TERM $sp; wait $sp
  echo "t=$SECONDS"
}
{
echo "card: $CARD"
case "$CARD" in *H200*) ;; *)
  echo "=== qualify (no committed entry for this card)"
  Q=/tmp/next-q; mkdir -p $Q
  OUT=$Q timeout 300 bash bench/gpu/qualify_h200.sh $B 2048,8192,32768 2>&1 | grep -vE "^ *[0-9]+ tokens" | tail -15
  tar -C $Q -czf "$O/qualify.tar.gz" .
  export HEADROOM_QUALIFICATIONS=$Q
  echo "t=$SECONDS" ;;
esac
echo "=== batch 1 (graphs on by default)"
HEADROOM_DECODE_STATS=1 timeout 200 $B bench ttft --backend cuda --synthetic $M --lengths 2048,32768 \
  --iterations 1 --warmup 1 --decode 96 2>&1 | grep -E "decode stats|tokens  TTFT" | cut -c1-500
echo "t=$SECONDS"
serve_run c64 --concurrency 64 --requests 64 --prompt-len 1024 --max-tokens 256
serve_run c256 --concurrency 256 --requests 256 --prompt-len 1024 --max-tokens 160
} 2>&1 | tee "$O/log.txt"
tar -C $S -czf "$O/serve.tar.gz" .
