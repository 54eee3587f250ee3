#!/usr/bin/env bash
# Session 43, call 4 (any card; ≈ 450 s; carry [".devbin/clock", ".devbin/fold"]): W1 on the FP8
# preset (the bf16 35B leaves an 80 GB H100 room for few sequences; the FP8 one runs W1 there
# as on the H200), fresh servers in turn:
# - head (main 141439e, .devbin/clock) against fold (branch combnorm, .devbin/fold): the MoE
#   combine with the next norm folded in (call 3 checks its bits);
# - head at --step-tokens 7,168 and 7,680 against 8,192 (session 43's call2.sh, whose reasoning
#   this takes over: a step's rows / 32 an expert — at 8,192 about half the experts need a
#   third 128-row tile holding a few rows; at 7,168 ≈ 2 % do; the budget was last measured in
#   session 2).
# ARMS (default all eight) and STOP_S (500) trim it: session 43 ran
# `ARMS="head h7168 h7680 head h7168 h7680" STOP_S=420` after call 3 found fold no faster.
# Prediction (written before the run): fold +0.5 to +1.5 % output tok/s and a few % less energy
# a generated token; step 7,680 within ±1.5 % of 8,192, 7,168 −2 to +3 %; TTFT p50 lower at the
# smaller budgets.
source bench/gpu/call_prelude.sh clock fold
source docs/perf/data/serving-s31/w1_arm.sh
p=8450
for arm in ${ARMS:-head fold h7168 h7680 head fold h7168 h7680}; do
  [ $SECONDS -lt ${STOP_S:-500} ] || break
  p=$((p + 1))
  case $arm in
    head) b=/tmp/clock/h/headroom; W1_SERVE_FLAGS= ;;
    fold) b=/tmp/fold/h/headroom; W1_SERVE_FLAGS= ;;
    h*) b=/tmp/clock/h/headroom; W1_SERVE_FLAGS="--step-tokens ${arm#h}" ;;
  esac
  W1_SERVE_FLAGS=$W1_SERVE_FLAGS w1 "$arm-$p" $b qwen3.6-35b-a3b-fp8 $p
done
