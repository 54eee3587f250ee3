#!/usr/bin/env bash
# Session 30, call 4 (the machine warm after call 3): the GPU test
# crates/engine/tests/cuda_memory.rs as first written (the shape's estimate,
# before calibrate.rs), every case printed. carry [".devbin/mem"].
source bench/gpu/env.sh >/dev/null; export HEADROOM_KERNEL_CACHE=/tmp/kcache
timeout 400 .devbin/mem/cuda_memory --ignored --nocapture --test-threads 1 2>&1 | grep -vE "^\s*$" | tee ${OUT:-/tmp}/call4-log.txt
