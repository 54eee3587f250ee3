#!/usr/bin/env bash
# Session 34 call 2 (the H100 of call 1, warm): fp8_backend on fp8ws, then
# W1 FP8 fp8ws and main again (the repeat of call 1's pair, reversed order).
# carry [".devbin/fp8ws", ".devbin/next"]. The fp8ws server never printed its
# start-up line in 200 s (the bench's 1,000 requests were refused).
source bench/gpu/env.sh >/dev/null; export HEADROOM_KERNEL_CACHE=/tmp/kcache; O=$OUT
for v in fp8ws next; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
SECONDS=0; timeout 150 /tmp/fp8ws/h/fp8_backend --ignored --test-threads 1 > $O/fp8_backend.txt 2>&1
echo "fp8_backend rc $? t=$SECONDS"; grep "test result" $O/fp8_backend.txt
source docs/perf/data/serving-s31/w1_arm.sh
for v in fp8ws next; do w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971; done; rm -f $O/w1-*.json
