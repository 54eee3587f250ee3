#!/usr/bin/env bash
# Session 43, call 2 (an H200; ≈ 420 s; carry [".devbin/clock"]): W1's step budget against the
# routed GEMMs' row tiles. A mixed step's rows (≤ --step-tokens, decode rows first) spread over
# 256 experts at top-8: rows / 32 an expert, so at 8,192 an expert averages 256 rows and about
# half the experts (std ≈ 16 rows) need a third 128-row tile holding a few rows, whose unit
# still streams the expert's whole B (session 42's probe: the tails cost 7 % of the routed FP8
# GEMMs at 8,192 tokens). At 7,168 rows (224 an expert) ≈ 2 % do. The budget was last measured
# in session 2 (2,048 / 8,192 / 16,384), on kernels 1.4× slower than today's.
# Prediction (written before the run): W1 bf16 at --step-tokens 7,680 within ±1.5 % of 8,192;
# at 7,168 −2 to +3 % (fewer tails, but 14 % more steps, each reading every expert's weights);
# TTFT p50 lower at the smaller budgets (shorter steps), ITL p50 about equal.
source bench/gpu/call_prelude.sh clock
source docs/perf/data/serving-s31/w1_arm.sh
B=/tmp/clock/h/headroom
p=8440
for st in 8192 7168 7680 8192 7168; do
  [ $SECONDS -lt 500 ] || break
  p=$((p + 1))
  W1_SERVE_FLAGS="--step-tokens $st" w1 "bf16-st$st-$p" $B qwen3.6-35b-a3b $p
done
