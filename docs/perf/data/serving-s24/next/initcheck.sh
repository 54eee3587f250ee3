#!/usr/bin/env bash
# Session 24 call 3: where the lone composed-route decode reads uninitialized
# device memory (call 2: cuBLAS's gemvx under cublasLtMatmul reads a fresh
# block's first bytes). The cuda_graphs test binary with its symbols
# (.devbin/s24sym, not stripped), under initcheck, host backtraces.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
xz -dc .devbin/s24sym/cuda_graphs.xz > /tmp/cuda_graphs && chmod +x /tmp/cuda_graphs
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
timeout 240 compute-sanitizer --tool initcheck --print-limit 6 --show-backtrace host \
  /tmp/cuda_graphs --ignored --nocapture --test-threads 1 cuda_a_lone_decode_updates_one_graph \
  > "$O/initcheck-sym.txt" 2>&1; echo "rc=$?"
grep -vE "^=========         Host Frame:.*(libcuda|libcublas|libc\.so|std::|core::ops|test::)" "$O/initcheck-sym.txt" | cut -c1-260 | head -120
