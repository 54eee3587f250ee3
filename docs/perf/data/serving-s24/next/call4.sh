#!/usr/bin/env bash
# Session 24 call 4: is the lone decode's graph mismatch the composed route's
# (next_d128) or everyone's? Lone decodes with graphs off and on, the steps
# whose logits differ printed: next_d128 (composed, fallbacks), moe_d256
# (fused), the 35B preset (the production kernels); then initcheck on the
# next_d128 lone decode with cuBLASLt's warm-up scratch zeroed (call 3: its
# only reports were the warm-up launches reading that scratch).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
xz -dc .devbin/s24sym/cuda_graphs.xz > /tmp/cuda_graphs && chmod +x /tmp/cuda_graphs
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
SECONDS=0
{
timeout 200 /tmp/cuda_graphs --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|differ|GraphStats" | cut -c1-400 | head -30
echo "t=$SECONDS"
timeout 100 compute-sanitizer --tool initcheck --print-limit 4 --show-backtrace host \
  /tmp/cuda_graphs --ignored --nocapture --test-threads 1 cuda_a_lone_decode_updates_one_graph \
  > "$O/initcheck-sym.txt" 2>&1; echo "initcheck rc=$?"
grep -E "ERROR SUMMARY|Uninitialized|Address|Host Frame:.*headroom" "$O/initcheck-sym.txt" | cut -c1-200 | head -30
echo "t=$SECONDS"
} > "$O/log-call4.txt" 2>&1
cat "$O/log-call4.txt"
