#!/usr/bin/env bash
# Session 26, call D (on the machine still warm from call C: its binaries
# unpacked in /tmp/s26c from .devbin/s26a; carry .devbin/s26a): W2's first
# 100 s with default flags (CUDA graphs on) against --no-cuda-graphs, and W3
# with default flags. Prediction: W2 +1-2 % (a decode-bound load at 200
# running, where call B's 256 running gained 1.1 %); W3 unchanged.
T=/tmp/s26c; B=$T/h/headroom; source bench/gpu/env.sh >/dev/null; export HEADROOM_KERNEL_CACHE=/tmp/kcache; M=qwen3.6-35b-a3b; S=$OUT; SECONDS=0
run() { n=$1; f=$2; shift 2; $B serve --backend cuda --synthetic $M --port 8921 $f > $S/serve-$n.log 2>&1 & sp=$!; for _ in $(seq 1 600); do grep -q "listening on" $S/serve-$n.log && break; sleep 0.5; done; timeout 130 $B bench serve --url http://127.0.0.1:8921 --json $S/$n.json "$@" > $S/$n.txt 2>&1; echo "$n: $(grep 'output tok/s' $S/$n.txt | head -1)"; grep -E "^ttft|^itl|preemptions" $S/$n.txt; kill -TERM $sp; wait $sp; echo t=$SECONDS; }
run w2-graphs-auto "" --concurrency 200 --requests 400 --prompt-len 1000 --max-tokens 2000 --time-limit-s 100
run w2-no-graphs "--no-cuda-graphs" --concurrency 200 --requests 400 --prompt-len 1000 --max-tokens 2000 --time-limit-s 100
run w3-graphs-auto "" --concurrency 16 --requests 16 --prompt-len 32768 --max-tokens 256
