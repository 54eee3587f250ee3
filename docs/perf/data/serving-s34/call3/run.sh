#!/usr/bin/env bash
# Session 34 call 3 (the same warm H100): the fp8ws server started until a
# start does not listen within 60 s; then the GPU's utilisation and memory
# (gdb was not installed: gdb3.txt). Starts 1 and 2 listened (28 s, 23 s),
# start 3 did not: GPU 100 %, 35,433 MiB (the weights, no pools yet).
source bench/gpu/env.sh >/dev/null; export HEADROOM_KERNEL_CACHE=/tmp/kcache; O=$OUT
ls /tmp/fp8ws/h >/dev/null || { mkdir -p /tmp/fp8ws && tar -xJf .devbin/fp8ws/bins.tar.xz -C /tmp/fp8ws; }
SECONDS=0
for i in 1 2 3 4; do
  /tmp/fp8ws/h/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8971 > $O/s$i.log 2>&1 & sp=$!
  ok=0; for _ in $(seq 1 120); do grep -q "listening on" $O/s$i.log && { ok=1; break; }; sleep 0.5; done
  echo "start $i ok=$ok t=$SECONDS"
  if [ $ok = 0 ]; then
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    cat /proc/$sp/status | grep -E "State|Threads"
    timeout 60 gdb -batch -p $sp -ex "thread apply all bt 12" > $O/gdb$i.txt 2>&1
    kill -9 $sp; wait $sp; break
  fi
  kill -TERM $sp; wait $sp
done
