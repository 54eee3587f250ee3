#!/usr/bin/env bash
# Session 31, call 3 (H100): one W1 mixed step of the FP8 preset kernel by
# kernel (ncu, one metric, kernels serialised, caches and clocks as the run
# leaves them), on main c439e76: a server with --warmup off under ncu with
# HEADROOM_PROFILE_STEP=45 (the window spans step 46: 8 prompts of 1,024 +
# the running decode rows), loaded by 512 requests of W1 at c = 512; summed
# by ncu_sum.py. (A first try killed ncu instead of the server: no log;
# its bf16 server then found the FP8 one still holding the GPU.)
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/s31b; mkdir -p $T && tar -xJf .devbin/s31b/bins.tar.xz -C $T
B=$T/h/headroom
run() { # NAME MODEL PORT
  local t0=$SECONDS
  HEADROOM_PROFILE_STEP=45 ncu --profile-from-start off --metrics gpu__time_duration.sum --cache-control none \
    --clock-control none --csv --log-file "$O/ncu-$1.csv" --target-processes all \
    $B serve --backend cuda --synthetic $2 --port $3 --warmup off --log info,headroom_engine=debug > "$O/serve-$1.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$1.log" && break; sleep 0.5; done
  grep -E "^serve on cuda" "$O/serve-$1.log" | cut -c1-400
  timeout 60 $B bench serve --url http://127.0.0.1:$3 --concurrency 512 --requests 512 --prompt-len 1024 \
    --max-tokens 128 --time-limit-s 20 > "$O/bench-$1.txt" 2>&1
  pkill -TERM -x headroom; wait $sp  # the server, not ncu: ncu writes its log as its target exits
  echo "$1: $((SECONDS - t0)) s"
  grep "engine step" "$O/serve-$1.log" | sed -n 45,48p | cut -c1-300
  python3 docs/perf/data/serving-s13/call1/ncu_sum.py "$O/ncu-$1.csv" > "$O/sum-$1.txt" 2>&1
  head -45 "$O/sum-$1.txt"
  gzip -f "$O/ncu-$1.csv"
}
run fp8 qwen3.6-35b-a3b-fp8 8931
