#!/usr/bin/env bash
# Session 41, call 4 (any sm_90a card; ≈ 330 s; carry [".devbin/head", ".devbin/route"]:
# head = main 8362bbf; route = branch routeatom 77e9f1c, packed with headroom-cuda:moe and
# headroom-cuda:fp8_grouped).
# Why: call 3 put moe_route at 100 us and moe_scatter at 72 us a layer at 32,768 tokens (30 /
# 20 at 8,192; 1.6 % of the kernels' time at 32k, 2.1 % at 8k), linear in the pairs: one
# global atomic a pair on 256 counters packed in eight 128-byte L2 lines. routeatom counts in
# shared memory, adds to the global counts once a block, and puts each expert's count on its
# own line. Prediction: route + scatter 172 -> 20-40 us at 32k, 50 -> 10-20 at 8k; the same
# outputs (the f64 checks, the bitwise reproducibility test, fp8_grouped's tile bits).
# 1. route: moe's correctness tests (check_moe.sh's), fp8_grouped's (skew: the slot order).
# 2. bench_the_35b_shape (route ms = routing + scatter, 2k / 8k / 32k), head / route / head / route.
# 3. ncu: moe_route and moe_scatter in an FP8 32k and 8k prefill, head and route.
# 4. FP8 32k TTFT head / route.
# 5. On an H200: the bars on route if its tests passed, else head.
source bench/gpu/call_prelude.sh head route
timeout 200 /tmp/route/h/moe --ignored --test-threads=1 --skip bench_the_35b --skip timing_ > "$O/moe-route.txt" 2>&1
echo "route moe tests rc $? (t=$SECONDS)"; grep -E "test result|panicked|FAILED" "$O/moe-route.txt" | head -5
timeout 150 /tmp/route/h/fp8_grouped --ignored --skip timing > "$O/fp8g-route.txt" 2>&1
echo "route fp8_grouped tests rc $? (t=$SECONDS)"; grep -E "test result|panicked|FAILED" "$O/fp8g-route.txt" | head -5
for v in head route head route; do
  timeout 60 /tmp/$v/h/moe --ignored --nocapture --exact bench_the_35b_shape >> "$O/bench35-$v.txt" 2>&1
  echo "bench35 $v rc $? (t=$SECONDS)"; grep -E "^\| (Some|None|Wgmma|Ws|Mma)" "$O/bench35-$v.txt" | tail -3 | cut -c1-140
done
for v in head route; do
  for n in 32768 8192; do
    HEADROOM_PROFILE_STEP=1 timeout 90 ncu --profile-from-start off -k regex:"moe_route|moe_scatter" \
      --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none \
      /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths $n \
      --iterations 1 --warmup 1 > "$O/ncu-$v-$n.csv" 2> /dev/null
    echo "ncu $v $n rc $? (t=$SECONDS): $(python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$v-$n.csv" | grep -E "moe_(route|scatter)" | awk '{printf "%s %s us; ", $1, $4}')"
  done
done
for v in head route head route; do
  timeout 90 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 3 --warmup 1 >> "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS): $(grep -E "tokens  TTFT" "$O/ttft-$v.txt" | tail -1 | cut -c1-60)"
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  B=/tmp/route/h/headroom; grep -q "test result: ok" "$O/moe-route.txt" || B=/tmp/head/h/headroom
  for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
    [ $SECONDS -lt 470 ] || break
    timeout 100 $B bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --iterations 3 --warmup 1 \
      --decode 64 > "$O/bars-$m.txt" 2>&1
    echo "bars $m ($B) rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$m.txt" | cut -c1-150
  done
fi
gzip -f "$O"/ncu-*.csv 2>/dev/null
cd "$O" && tar -czf call4.tgz --exclude call4.tgz * && find . -type f ! -name call4.tgz -delete
