#!/usr/bin/env bash
# Session 24 call 5: call 4 found the graphs' logits differ from eager from
# the first *update* of a kept graph (the 35B preset: steps 3.. after a
# probe and an instantiation that agree). Here every capture instantiates its
# own graph (CudaBackend::set_graph_updates(false)): if the lone decodes then
# agree to the bit, cuGraphExecUpdate is what leaves a node stale. And both
# runs without programmatic dependent launch
# (CudaDevice::set_programmatic_launch(false)): if those agree, a kernel
# reads before its griddepcontrol.wait what its predecessor inside a graph
# still writes. Build on the build machine first:
#   cargo test --release -p headroom-engine --test cuda_graphs --no-run
#   (copy the binary, not stripped, to .devbin/s24sym/cuda_graphs, xz it;
#   carry .devbin/s24sym).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
xz -dc .devbin/s24sym/cuda_graphs.xz > /tmp/cuda_graphs && chmod +x /tmp/cuda_graphs
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
timeout 200 /tmp/cuda_graphs --ignored --nocapture --test-threads 1 2>&1 | grep -E "^test |test result|panicked|differ|GraphStats" | cut -c1-400 | head -30 | tee "$O/log-call5.txt"
