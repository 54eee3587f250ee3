#!/usr/bin/env bash
# Session 42, call 7 (the same H100, warm; carry [".devbin/head"]: main, code ae32bcf): the FP8
# 8k and 32k TTFT with the SM clock, memory clock, power and throttle reasons sampled every
# 20 ms (session 41 saw the 32k prefill's kernels ≈ 8 % slower in the timed runs than their sum
# under ncu's serialised replay; is it the power cap?). Decided on the warm machine with the
# budget's last minutes: no prediction was written before it ran.
source bench/gpu/call_prelude.sh head; B=/tmp/head/h/headroom; F=qwen3.6-35b-a3b-fp8
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 20 > "$O/smi-$F.csv" 2>/dev/null & smi=$!
timeout 110 $B bench ttft --backend cuda --synthetic $F --lengths 8192,32768 --iterations 3 --warmup 1 \
  > "$O/bars-$F.txt" 2>&1
echo "bars rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|run [0-9]" "$O/bars-$F.txt" | cut -c1-80
kill $smi; wait $smi 2>/dev/null
awk -F', ' '{gsub(/ MHz| W/,""); if ($4 > 400) {n++; c+=$2; p+=$4; if (min == "" || $2 < min) min = $2; r[$6]++}}
  END {if (n) {printf "under load (>400 W): %d samples, SM clock mean %.0f MHz, min %d; power mean %.0f W\n", n, c/n, min, p/n;
  for (k in r) print "  throttle", k, r[k]}}' "$O/smi-$F.csv"
awk -F', ' '{gsub(/ MHz| W/,""); b=int($2/100)*100; h[b]++} END {for (k in h) print "clock", k, h[k]}' "$O/smi-$F.csv" |
  sort -k2 -n | tail -8
gzip "$O/smi-$F.csv"
