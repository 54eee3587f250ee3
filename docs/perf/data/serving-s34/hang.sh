#!/usr/bin/env bash
# Session 34: the fp8ws server hangs at start-up in about 2 of 5 starts (GPU
# 100 % busy, no start-up line: inside the engine's calibration). Start it
# until a start hangs, then attach cuda-gdb: the running kernels, and for
# block 0 the warps' PCs and the instructions there; the kernel cache's
# cubins holding the ws FP8 kernels disassembled for the PCs.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
mkdir -p /tmp/fp8ws && tar -xJf .devbin/fp8ws/bins.tar.xz -C /tmp/fp8ws
SECONDS=0
for i in 1 2 3 4 5; do
  /tmp/fp8ws/h/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8971 > "$O/s$i.log" 2>&1 &
  sp=$!; ok=0
  for _ in $(seq 1 80); do grep -q "listening on" "$O/s$i.log" && { ok=1; break; }; sleep 0.5; done
  echo "start $i ok=$ok t=$SECONDS"
  if [ $ok = 0 ]; then
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    timeout 120 cuda-gdb -batch -p $sp \
      -ex "info cuda kernels" \
      -ex "cuda kernel 0 block (0,0,0) thread (0,0,0)" \
      -ex "info cuda warps" \
      -ex "x/8i \$pc" \
      -ex "cuda warp 4 lane 0" -ex "x/8i \$pc" \
      -ex "cuda warp 8 lane 0" -ex "x/8i \$pc" \
      -ex "cuda block (1,0,0) thread (0,0,0)" -ex "info cuda warps" \
      -ex "info cuda blocks" > "$O/cgdb.txt" 2>&1
    echo "cuda-gdb rc $? t=$SECONDS"; grep -v "^\[" "$O/cgdb.txt" | head -120 | cut -c1-200
    kill -9 $sp; wait $sp 2>/dev/null
    for f in $(grep -l "moe_gemm_gate_up_ws_fp8" /tmp/kcache/* 2>/dev/null | head -2); do
      cuobjdump -sass "$f" > "$O/sass-$(basename "$f").txt" 2>/dev/null || nvdisasm "$f" > "$O/sass-$(basename "$f").txt" 2>&1
    done
    ls -la /tmp/kcache | head; break
  fi
  kill -TERM $sp; wait $sp
done
