#!/usr/bin/env bash
# Session 13, one call: ncu of one W1 decode-only step (512 rows) and one W1
# mixed step (8 prompts + decode rows) on main's binary, then W3 and W2 on a
# fresh default server. Everything lands in $OUT.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
mkdir -p /tmp/s13bins && tar -xJf .devbin/lead/bins.tar.xz -C /tmp/s13bins
B=/tmp/s13bins/headroom
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$O/gpu.txt"
M=qwen3.6-35b-a3b
start_server() { # PORT LOG [PREFIX COMMAND...]; extra server flags in $SARGS
    local port=$1 log=$2; shift 2
    "$@" "$B" serve --backend cuda --synthetic $M --port "$port" --log info,headroom_engine=debug ${SARGS:-} > "$log" 2>&1 &
    SPID=$!
    for i in $(seq 1 600); do
        grep -q "listening on" "$log" && return 0
        kill -0 $SPID 2>/dev/null || { echo "server died: $log"; tail -5 "$log"; return 1; }
        sleep 0.5
    done
    echo "server not ready: $log"; return 1
}
stop_server() { pkill -TERM -x headroom; wait $SPID; echo "server exit $?"; }
ncu_run() { # NAME STEP REQUESTS PORT
    local name=$1 step=$2 req=$3 port=$4
    local t0=$(date +%s)
    export HEADROOM_PROFILE_STEP=$step
    start_server $port "$O/serve-$name.log" \
        ncu --profile-from-start off --metrics gpu__time_duration.sum --cache-control none \
            --clock-control none --csv --log-file "$O/ncu-$name.csv" --target-processes all || return 1
    "$B" bench serve --url http://127.0.0.1:$port --concurrency 512 --requests $req --prompt-len 1024 \
        --max-tokens 128 --json "$O/bench-$name.json" > "$O/bench-$name.txt" 2>&1
    echo "bench $name rc $?"
    stop_server
    unset HEADROOM_PROFILE_STEP
    echo "$name took $(( $(date +%s) - t0 )) s"
    python3 .devbin/lead/ncu_sum.py "$O/ncu-$name.csv" > "$O/ncu-$name-sum.txt" 2>&1
    head -40 "$O/ncu-$name-sum.txt"
}
# --warmup off: step numbers are W1's own (call A: step 1 = one prompt, 2-66 prefill 8 a step,
# 67-128 decode-only 512 rows).
SARGS="--warmup off"
ncu_run decode 100 512 8101
ncu_run mixed 45 512 8102
SARGS=""
t0=$(date +%s)
start_server 8103 "$O/serve-w23.log" || exit 1
"$B" bench serve --url http://127.0.0.1:8103 --concurrency 16 --requests 16 --prompt-len 32768 \
    --max-tokens 256 --json "$O/w3.json" > "$O/w3.txt" 2>&1; echo "w3 rc $?"; tail -25 "$O/w3.txt"
"$B" bench serve --url http://127.0.0.1:8103 --concurrency 200 --requests 400 --prompt-len 1000 \
    --max-tokens 2000 --time-limit-s ${W2_LIMIT:-170} --json "$O/w2.json" > "$O/w2.txt" 2>&1; echo "w2 rc $?"; tail -25 "$O/w2.txt"
stop_server
echo "w23 took $(( $(date +%s) - t0 )) s"
grep -E "^(warm-up|pool|state)" "$O/serve-w23.log" | head
for f in "$O"/serve-*.log; do gzip -k "$f"; done
