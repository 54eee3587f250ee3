#!/usr/bin/env bash
# Prepared in session 35 (any sm_90a card; ≈ 150 s; carry [".devbin/next"]):
# session 33's call 4 again, unchanged, on main d5f164c (.devbin/next, the FP8
# ws GEMMs merged): one FP8 W1 mixed step (36) under ncu, kernels serialised,
# summed by session 13's ncu_sum.py — the step's parts after the ws kernels,
# against serving-s33/call4/sum-fp8.txt, to pick the next FP8 target by data
# (docs/perf/cuda-fp8.md, session 35's reasoning).
exec bash "$(dirname "$0")/../../serving-s33/call4.sh"
