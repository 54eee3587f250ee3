#!/usr/bin/env bash
# On the GPU machine: every GPU test binary's `#[ignore]`d tests at once, one
# binary after another, for a card no session has checked yet (a new kind
# lent, a new driver). Timing binaries (`*_timing`) are left out (they print
# timings; their own scripts run them), and so are the two-GPU binaries
# (`nccl`, `tp_split`: bench/gpu/check_tp.sh) on a single GPU, and the cuda
# crate's library tests: its ignored tests are the NVRTC kernel gate's, which
# need no GPU and run in CI (.ci/kernel-gate.sh) with the NVRTC it pins; the
# device's toolkit NVRTC writes no ptxas report into the program log, so their
# spill checks fail there (session 29).
#
# Build on the build machine: bench/gpu/pack_tests.sh DIR; carry DIR; here:
#   bash bench/gpu/check_all.sh DIR [SECONDS]
# ONLY="name ..." runs just those binaries (e.g. the ones a cut-off run left:
# `ONLY="linear_host moe paged_attention state_copy"`), the others are
# counted as skipped.
# Stops starting binaries after SECONDS (default 500) and names those not run;
# a binary still running at SECONDS is stopped there and counted as skipped
# (cut off), not failed, so the whole run fits a device call.
# Writes $OUT/check-all/<binary>.txt and $OUT/check-all/summary.json (one
# object a binary: passed, failed, ignored-only counts from libtest's own
# summary line, the exit status and whether it ran); the last line printed is
# `N passed, N failed, N skipped` over all binaries (skipped = not run).
set -uo pipefail
DIR=${1:?usage: check_all.sh DIR-with-bins.tar.xz [SECONDS]}
LIMIT=${2:-500}
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-out}
R=$OUT/check-all
mkdir -p "$R"
X=$(mktemp -d)
tar -xJf "$DIR/bins.tar.xz" -C "$X"
# The binaries read fixtures under the build machine's checkout path.
if [ -f "$DIR/built-at" ]; then
  at=$(cat "$DIR/built-at")
  [ -e "$at" ] || { mkdir -p "$(dirname "$at")" && ln -s "$PWD" "$at"; }
fi
# shellcheck source=/dev/null
source bench/gpu/env.sh
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
echo "card: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1) x $GPUS"
SECONDS=0
passed=0 failed=0 skipped=0
echo "[" > "$R/summary.json"
first=1
for exe in "$X"/t/*; do
  name=$(basename "$exe")
  why=""
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then why="not in ONLY"; fi
  [ -n "$why" ] || case "$name" in
    *_timing) why="timing binary" ;;
    lib_headroom_cuda) why="NVRTC tests, no GPU: CI's kernel gate runs them with its pinned NVRTC" ;;
    nccl|tp_split) [ "$GPUS" -ge 2 ] || why="needs 2 GPUs" ;;
  esac
  [ -n "$why" ] || [ "$SECONDS" -lt "$LIMIT" ] || why="out of time (${LIMIT} s)"
  if [ -n "$why" ]; then
    echo "--- $name: not run ($why)"
    skipped=$((skipped + 1))
    p=0 f=0 rc=null ran=false
  else
    t0=$SECONDS
    left=$((LIMIT - SECONDS))
    cap=200
    [ "$left" -ge "$cap" ] || cap=$left
    timeout "$cap" "$exe" --ignored --test-threads 1 > "$R/$name.txt" 2>&1
    rc=$?
  fi
  if [ -z "$why" ] && [ "$rc" -eq 124 ] && [ "$cap" -lt 200 ]; then
    why="cut off at ${LIMIT} s"
    echo "--- $name: not finished ($why, $((SECONDS - t0)) s)"
    skipped=$((skipped + 1))
    p=0 f=0 ran=false
  elif [ -z "$why" ]; then
    # libtest's summary lines (one a test target): sum them.
    p=$(grep -oE "test result: [A-Za-z]+\. [0-9]+ passed" "$R/$name.txt" | awk '{s += $4} END {print s + 0}')
    f=$(grep -oE "; [0-9]+ failed" "$R/$name.txt" | awk '{s += $2} END {print s + 0}')
    [ "$rc" -eq 0 ] || [ "$f" -gt 0 ] || f=1  # a crash or a timeout is a failure
    echo "--- $name: $p passed, $f failed, rc $rc, $((SECONDS - t0)) s"
    [ "$f" -eq 0 ] || grep -E "^test .* FAILED|panicked at|^---- " "$R/$name.txt" | head -8
    passed=$((passed + p)); failed=$((failed + f)); ran=true
  fi
  [ $first -eq 1 ] || echo "," >> "$R/summary.json"
  first=0
  printf '{"binary": "%s", "ran": %s, "passed": %s, "failed": %s, "rc": %s, "why_not_run": "%s"}' \
    "$name" "$ran" "$p" "$f" "$rc" "$why" >> "$R/summary.json"
done
echo "]" >> "$R/summary.json"
rm -rf "$X"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
