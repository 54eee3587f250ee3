#!/usr/bin/env bash
# Prepared in session 33 for the next session lent an H200 (sessions 27-33
# got only H100s; session 33's four needs_h200 requests were refused). It
# supersedes serving-s32/next/call.sh (the same arms; main now has sessions
# 31-33's changes). One call under 600 s: the bars on
# main, and sessions 31-33's changes against session 31's start, on the
# card the bars are set on.
#   A = .devbin/s31start (main 378b2bc: before session 31),
#   B = .devbin/next     (main at the next session's start).
# 1. W1 (1,000 x 1,024 / 128, c = 512, default flags), fresh servers:
#    FP8 A, B; bf16 A, B; each server's capacity line. Prediction (from
#    the H100's +7.6 % over sessions 31-32 on FP8, +0.1 % in 33): FP8 +6-9 %
#    (session 26: 6,039.4), bf16 +0.5-1.5 % (session 26: 5,599.2; the GDN
#    prep, the mixers' normed input freed early: more running sequences).
# 2. `bench ttft --lengths 2048,32768 --iterations 3 --decode 64`, B, bf16
#    and FP8: batch-1 decode (bars 500 / 450 tok/s, FP8 1.4x bf16) and TTFT
#    (FP8 32k bar 0.45 s).
# Build here:
#   git worktree add /tmp/s31start 378b2bc && (cd /tmp/s31start &&
#     bash bench/gpu/pack_bins.sh "$OLDPWD/.devbin/s31start")
#   bash bench/gpu/pack_bins.sh .devbin/next
# carry [".devbin/s31start", ".devbin/next"]; kind nvidia-h200 with
# needs_h200 (W1 bf16 at c = 512 does not fit an H100's 78 GiB).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s31start next; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
for a in "fp8 $F" "bf16 $M"; do set -- $a
  for v in s31start next; do w1 $1-$v /tmp/$v/h/headroom $2 8971; echo "  $(cap "$O/serve-$1-$v.log")"; done
done
for m in $M $F; do
  timeout 150 /tmp/next/h/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 \
    --iterations 3 --warmup 1 --decode 64 > "$O/ttft-$m.txt" 2>&1
  echo "--- $m (rc $?, t=$SECONDS)"; grep -E "tokens  TTFT" "$O/ttft-$m.txt" | sed 's/layer [0-9]* fused, //g' | cut -c1-200
done
