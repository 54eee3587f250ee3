#!/usr/bin/env bash
# Prepared in session 34: find the start-up hang of branch fp8ws's server
# (the warp-specialised FP8 grouped GEMMs; 2 of 5 starts on the H100 in
# session 34 never printed the start-up line, GPU 100 % busy, 35 GB used:
# inside the engine's calibration). Any sm_90a card.
# Build here (branch fp8ws-watch = fp8ws + the skew test + the DEBUG host
# watch, crates/cuda/src/ops/moe/ws_watch.rs):
#   git worktree add /tmp/fp8ww fp8ws-watch && (cd /tmp/fp8ww && bash bench/gpu/pack_bins.sh \
#     "$OLDPWD/.devbin/fp8ww" headroom-cuda:fp8_grouped)
# carry [".devbin/fp8ww"]; ≈ 400 s.
# 1. The skew test: the ws kernels under routings no random test makes
#    (all tokens on 8 experts; 64 / 65 / 128 / 129 rows an expert; ...),
#    25 runs each against the tile kernels' bits; a hang aborts it.
# 2. Server starts with HEADROOM_WS_WATCH (the host polls each ws launch
#    for 5 s; a hang prints "ws watch: HANG" with the pass, the unit
#    counters read while it runs, each unfinished CTA's progress record --
#    its producer's unit and step, the step each MMA warpgroup waits for --
#    the rows an expert and the tile offsets, then aborts): the first start compiles the kernels (up to 240 s), then
#    up to 6 starts, then 2 with HEADROOM_WS_WATCH=sync (counters checked
#    zero before each launch), then 2 with CUDA_MODULE_LOADING=EAGER. A
#    start that neither listens nor reports gets its host threads'
#    backtraces (cuda-gdb, host side only). On a fresh machine the first
#    start compiles the kernels (> 40 s); with a warm one each start is
#    ≈ 25 s, so the call is ≈ 300-450 s.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
mkdir -p /tmp/ww && tar -xJf .devbin/fp8ww/bins.tar.xz -C /tmp/ww
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
SECONDS=0
timeout 150 /tmp/ww/h/fp8_grouped --ignored --exact --nocapture \
  warp_specialised_fp8_gemms_finish_and_match_the_tiles_under_skewed_routings > "$O/skew.txt" 2>&1
echo "skew test rc $? (t=$SECONDS)"; grep -E "fp8 ws under skew|hang|differ|test result|panicked" "$O/skew.txt" | head -12
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening LOG PID HALF_SECONDS
start() {  # start N WAIT_HALF_SECONDS MODE
  HEADROOM_WS_WATCH=$3 /tmp/ww/h/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8971 \
    > "$O/s$1.log" 2>&1 &
  local sp=$! ok=0
  serve_listening "$O/s$1.log" $sp "$2" && ok=1
  echo "start $1 ($3): listening=$ok t=$SECONDS"
  grep -E "ws watch" "$O/s$1.log" | grep -v "ws watch: CTA " | cut -c1-1500 | head -6
  grep -E "ws watch: CTA " "$O/s$1.log" | head -24
  if [ $ok = 0 ] && kill -0 $sp 2>/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    # No ws launch reported: where the host threads wait (cuda-gdb's host
    # side; its CUDA commands hung in session 34's call 5, so none here).
    timeout -s KILL 60 cuda-gdb -batch -p $sp -ex "thread apply all bt 20" > "$O/bt$1.txt" 2>&1
    grep -E "^#[0-9]+ " "$O/bt$1.txt" | sed 's/^#[0-9]* *0x[0-9a-f]* in //; s/^#[0-9]* *//' | cut -c1-150 |
      sort | uniq -c | sort -rn | head -25
    kill -9 $sp
  else
    kill -TERM $sp 2>/dev/null
  fi
  wait $sp 2>/dev/null
}
start 0 480 1
for n in 1 2 3 4 5; do start $n 120 1; done
for n in 6 7; do start $n 160 sync; done
# Lazy module loading ruled in or out (a hint only: 2 starts).
export CUDA_MODULE_LOADING=EAGER
for n in 8 9; do start $n 160 1; done
