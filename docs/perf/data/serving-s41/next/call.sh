#!/usr/bin/env bash
# Prepared in session 41 for the next session: the bars on the bar's card after sessions 40-41's
# merges (pairs2, rankpar, routeatom, scalepf), none of which has run on an H200. Needs an H200
# (W1 bf16 and W2 do not fit an H100's memory plan); ≈ 560 s; carry [".devbin/head"]: main,
# packed by `bash bench/gpu/pack_bins.sh .devbin/head`.
# Predictions (from the H100's side-by-side runs, sessions 40-41): FP8 32k TTFT 494.6 (session
# 39) -> 470-480 ms (bar 450: not met); FP8 decode after 2k 508 (session 36) -> 515-525 tok/s
# (x1.23-1.26 of bf16; bar x1.4: not met); bf16 decode 419 / 388 unchanged (bars 500 / 450);
# W1 FP8 6,709-6,731 (session 37) -> 6,800-6,900 (bar 8,000); W1 bf16 5,684 -> 5,700-5,750
# (bar 6,000); W2's first 100 s 6,719 (session 26) -> 6,750-6,850 (bar 9,000).
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom; F=qwen3.6-35b-a3b-fp8; M=qwen3.6-35b-a3b
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || echo "not an H200: the bars below are not the bar's card"
for m in $F $M; do
  # The SM clock and power every 20 ms beside the runs: session 41 saw the 32k prefill's kernels
  # ≈ 8 % slower in the runs than in ncu's serialised replay (the power limit?).
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 20 \
    > "$O/smi-$m.csv" 2>/dev/null & smi=$!
  timeout 110 $B bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --iterations 3 --warmup 1 \
    --decode 64 > "$O/bars-$m.txt" 2>&1
  echo "bars $m rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$m.txt" | cut -c1-150
  kill $smi 2>/dev/null; wait $smi 2>/dev/null
  awk -F', ' '{gsub(/ MHz| W/,""); if ($3 > 400) {n++; c+=$2; p+=$3; if (min == "" || $2 < min) min = $2}}
    END {if (n) printf "  under load (power > 400 W): %d samples, SM clock mean %.0f MHz, min %d; power mean %.0f W\n", n, c / n, min, p / n}' "$O/smi-$m.csv"
done
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
w1 fp8 $B $F 8971
[ $SECONDS -lt 330 ] && w1 bf16 $B $M 8972
if [ $SECONDS -lt 400 ]; then
  $B serve --backend cuda --synthetic $M --port 8973 > "$O/serve-w2.log" 2>&1 & sp=$!
  if serve_listening "$O/serve-w2.log" $sp 400; then
    timeout 130 $B bench serve --url http://127.0.0.1:8973 --json "$O/w2.json" --concurrency 200 --requests 400 \
      --prompt-len 1000 --max-tokens 2000 --time-limit-s 100 > "$O/w2.txt" 2>&1
    echo "w2: $(grep 'output tok/s' "$O/w2.txt" | head -1) (t=$SECONDS)"
  fi
  kill -TERM $sp; wait $sp
fi
cd "$O" && tar -czf bars.tgz --exclude bars.tgz * && find . -type f ! -name bars.tgz -delete
