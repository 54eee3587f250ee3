#!/usr/bin/env bash
# Session 44, call 2 (≈ 200–300 s; carry [".devbin/head"] = main packed by
# `bash bench/gpu/pack_bins.sh .devbin/head headroom-hardware:lib`): one W1
# decode-only step (step 100: ≈ 512 rows, ≈ 1,090-token sequences) and one W1
# mixed step (step 45: 8 prompts of 1,024 + the running decode rows) under ncu,
# kernel by kernel, on today's kernels — session 13's call (data/serving-s13/
# call1/s13.sh) again, 31 sessions later. bf16 on an H200 (W1's bf16 bar);
# the FP8 preset on an H100 (the bf16 35B does not leave W1 its memory there),
# and on an H200 the FP8 decode-only step too if the time allows.
# Question: which parts of W1's decode-only step (≈ 35 % of W1's time) are
# furthest from their floor now — session 13: GDN state 3.78 TB/s, experts
# 3.86 TB/s, cuBLAS projections at 512 rows 4.58 ms against a ≈ 2.6 ms
# compute floor (wave quantisation of small-M GEMMs?).
# Prediction (written before the run): bf16 decode-only step 39–43 ms of
# kernels (session 13: 43.4), GDN decode 15.5–17 ms, routed experts 15–16.7,
# cuBLAS 4–4.6, attention 2.5–3.3; mixed step 95–106 ms (session 17: 105.5).
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then MODELS="qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8"; else MODELS="qwen3.6-35b-a3b-fp8"; fi
source bench/gpu/serve_wait.sh
ncu_step() { # NAME MODEL STEP PORT
  local name=$1 model=$2 step=$3 port=$4
  HEADROOM_PROFILE_STEP=$step ncu --profile-from-start off --metrics gpu__time_duration.sum \
    --cache-control none --clock-control none --csv --log-file "$O/ncu-$name.csv" --target-processes all \
    "$B" serve --backend cuda --synthetic "$model" --port "$port" --warmup off \
    --log info,headroom_engine=debug > "$O/serve-$name.log" 2>&1 &
  local sp=$!
  if ! serve_listening "$O/serve-$name.log" $sp 400; then
    echo "$name: the server did not start (t=$SECONDS)"; tail -c 300 "$O/serve-$name.log"
    kill -9 $sp 2>/dev/null; pkill -9 -x headroom; wait $sp 2>/dev/null; return 1
  fi
  timeout 150 "$B" bench serve --url "http://127.0.0.1:$port" --concurrency 512 --requests 512 \
    --prompt-len 1024 --max-tokens 128 --json "$O/bench-$name.json" > "$O/bench-$name.txt" 2>&1
  echo "$name bench rc $? (t=$SECONDS)"
  pkill -TERM -x headroom; wait $sp 2>/dev/null
  python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$name.csv" > "$O/sum-$name.txt" 2>&1
  head -14 "$O/sum-$name.txt" | cut -c1-110
  gzip -f "$O/ncu-$name.csv" "$O/serve-$name.log"
}
for m in $MODELS; do
  tag=${m#qwen3.6-35b-a3b}; tag=${tag:-bf16}; tag=${tag#-}
  [ $SECONDS -lt 330 ] && ncu_step "decode-$tag" "$m" 100 8471
  [ "$tag" = bf16 ] && [ $SECONDS -lt 330 ] && ncu_step "mixed-$tag" "$m" 45 8472
done
echo "done (t=$SECONDS)"
