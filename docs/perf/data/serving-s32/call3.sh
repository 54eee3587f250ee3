#!/usr/bin/env bash
# Session 32, call 3 (an H100). s32a = main 016abb8's code (fp8share),
# s32c = branch normcodes + the mixers free their normed input once
# projected. Call 2 found the norm's codes cost 2,112 bytes a row of the
# step's measured peak (346 -> 344 running, TTFT p50 +2.6 %): the peak is
# in the mixer, where the normed rows (4 KiB a row) and now their codes
# stayed alive. Prediction: s32c's measured step activations below s32a's
# (81,096 bytes a row) by up to ~6 KiB a row, more running sequences on FP8
# and bf16, W1 FP8 +0.5-1.5 % on s32a with TTFT p50 no worse.
# 1. Greedy tokens on the FP8 35B, s32c (s32a's ids are in call 2's output).
# 2. W1 FP8 s32a, s32c (fresh servers); each server's capacity line.
# 3. bf16 35B: each binary's start-up capacity line (no load).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s32a s32c; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 120 /tmp/s32c/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-s32c.jsonl" > /dev/null 2>&1
echo "fingerprint s32c rc $? (t=$SECONDS): $(python3 -c 'import json,sys; print([json.loads(l).get("ids") for l in open(sys.argv[1]) if "ids" in l])' "$O/fp-s32c.jsonl")"
cap() { grep -o "up to [0-9]* running\|step activations [0-9]* bytes a row (measured [0-9]*)" "$1" | tr '\n' ' '; }
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
for v in s32a s32c; do w1 fp8-$v /tmp/$v/h/headroom $F 8971; echo "  $(cap "$O/serve-fp8-$v.log")"; done
for v in s32a s32c; do
  /tmp/$v/h/headroom serve --backend cuda --synthetic $M --port 8980 > "$O/serve-bf16-$v.log" 2>&1 &
  sp=$!
  for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-bf16-$v.log" && break; sleep 0.5; done
  kill -TERM $sp; wait $sp
  echo "bf16 $v (t=$SECONDS): $(cap "$O/serve-bf16-$v.log")"
done
