#!/usr/bin/env bash
# Session 30, call 2 (the machine warm after call 1 = serving-s29/next/call.sh alloc):
# the splitalloc binary (`headroom-split` in .devbin/next) at --memory-fraction
# 0.95 and 0.93, fresh servers, default flags otherwise: 128 x 1,024 / 256 at
# c = 64, 512 x 1,024 / 128 at c = 256, two 16,000-token prompts alone;
# nvidia-smi every 0.5 s. carry [".devbin/next"].
T=/tmp/n2; mkdir -p $T; tar -xJf .devbin/next/bins.tar.xz -C $T
source bench/gpu/env.sh >/dev/null; export HEADROOM_KERNEL_CACHE=/tmp/kcache
O=${OUT:-/tmp/out}; mkdir -p "$O"; SECONDS=0
for f in 0.95 0.93; do
  $T/h/headroom-split serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8950 --memory-fraction $f > $O/serve-$f.log 2>&1 & sp=$!
  for _ in $(seq 1 300); do grep -q "listening on" $O/serve-$f.log && break; sleep 0.5; done
  echo "--- $f t=$SECONDS"
  grep -oE "solo_stripe [0-9]+; up to [0-9]+ running, context [0-9]+" $O/serve-$f.log
  (while sleep 0.5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits; done > $O/smi-$f.txt) & smi=$!
  for c in 64 256; do
    n=$((c*2)); m=$([ $c = 64 ] && echo 256 || echo 128)
    timeout 110 $T/h/headroom bench serve --url http://127.0.0.1:8950 --json $O/c$c-$f.json --concurrency $c \
      --requests $n --prompt-len 1024 --max-tokens $m > $O/c$c-$f.txt 2>&1
    echo "c$c rc $?"; grep -E "output tok/s|^server" $O/c$c-$f.txt | cut -c1-330
  done
  timeout 50 $T/h/headroom bench serve --url http://127.0.0.1:8950 --concurrency 1 --requests 2 --prompt-len 16000 --max-tokens 1 > $O/l16-$f.txt 2>&1
  grep -E "^ttft" $O/l16-$f.txt
  kill $smi; echo "smi peak $(sort -n $O/smi-$f.txt | tail -1) MiB"
  kill -TERM $sp; wait $sp
done
