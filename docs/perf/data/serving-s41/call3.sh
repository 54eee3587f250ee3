#!/usr/bin/env bash
# Session 41, call 3 (any sm_90a card; ≈ 300 s; carry [".devbin/head"]: main 8362bbf).
# Why: call 2's ncu of the FP8 ws grouped GEMMs in an 8,192-token prefill (one H100) put
# gate+up at 250.5 us (DRAM 76 %) and down at 152.9 us (DRAM 83 %), 0.40 ms a layer, while
# the whole routed experts take 0.85 ms at 8,192 tokens (fp8_grouped timing, session 40) and
# the 32k prompt's MoE part 3.9 ms a layer (session 38) against ≈ 1.6 ms of GEMMs. Where does
# the rest go? Every kernel of one FP8 prefill step under ncu (gpu__time_duration, DRAM
# bytes; HEADROOM_PROFILE_STEP=1: the window is the timed run's prefill after the warm-up's),
# at 32,768 and 8,192 tokens, summed by kernel name.
# Prediction: the per-slot down output (tokens x 8 x 2,048 bf16, 1.07 GB at 32k) written and
# read back by the combine, the routing's sort and the quantizations: ≈ 1–1.5 ms a layer at 32k.
# On an H200 after that: the bars on head (FP8 / bf16 TTFT 2k and 32k, decode after 2k / 32k).
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom
for n in 32768 8192; do
  HEADROOM_PROFILE_STEP=1 timeout 200 ncu --profile-from-start off \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum --csv \
    --cache-control none --clock-control none \
    $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths $n --iterations 1 --warmup 1 \
    > "$O/ncu-$n.csv" 2> "$O/ncu-$n.err"
  echo "== ncu $n (rc $?, t=$SECONDS)"
  python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$n.csv" | head -42 | cut -c1-120
done
gzip -f "$O"/ncu-*.csv 2>/dev/null
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
    [ $SECONDS -lt 480 ] || break
    timeout 100 $B bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --iterations 3 --warmup 1 \
      --decode 64 > "$O/bars-$m.txt" 2>&1
    echo "bars $m rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$m.txt" | cut -c1-150
  done
fi
cd "$O" && tar -czf call3.tgz --exclude call3.tgz * && find . -type f ! -name call3.tgz -delete
