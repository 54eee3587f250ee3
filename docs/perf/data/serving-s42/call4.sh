#!/usr/bin/env bash
# Session 42, call 4 (H200, warm; carry [".devbin/head"]): W1 on the bf16 default (bar 6,000
# output tok/s; serving-s41/next/call.sh's W1 bf16). Prediction (session 41, that script):
# 5,700–5,750.
source bench/gpu/call_prelude.sh head; source docs/perf/data/serving-s31/w1_arm.sh
w1 bf16 /tmp/head/h/headroom qwen3.6-35b-a3b 8973
