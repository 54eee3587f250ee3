#!/usr/bin/env bash
# Session 44, call 6 (≈ 90 s; carry [".devbin/head"] = main packed by
# `bash bench/gpu/pack_bins.sh .devbin/head headroom-hardware:lib`): W1's FP8
# mixed step (step 45: 8 prompts of 1,024 + the running decode rows) under
# ncu, kernel by kernel — call 2 took the bf16 mixed step and both decode-only
# steps; the FP8 mixed step on an H200 was last taken in session 36.
# Prediction (written before the run): 75–90 ms of kernels; the routed ws
# GEMMs 22–28 %, cuBLASLt FP8 dense 18–24 %, the decode rows' GDN recurrent
# step 10–13 %, the GDN prefill rule (prep + scan) 8–10 %.
source bench/gpu/call_prelude.sh head
B=/tmp/head/h/headroom
source bench/gpu/serve_wait.sh
name=mixed-fp8
HEADROOM_PROFILE_STEP=45 ncu --profile-from-start off --metrics gpu__time_duration.sum \
  --cache-control none --clock-control none --csv --log-file "$O/ncu-$name.csv" --target-processes all \
  "$B" serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8491 --warmup off \
  --log info,headroom_engine=debug > "$O/serve-$name.log" 2>&1 &
sp=$!
if serve_listening "$O/serve-$name.log" $sp 400; then
  timeout 150 "$B" bench serve --url "http://127.0.0.1:8491" --concurrency 512 --requests 512 \
    --prompt-len 1024 --max-tokens 128 --json "$O/bench-$name.json" > "$O/bench-$name.txt" 2>&1
  echo "$name bench rc $? (t=$SECONDS)"
else
  echo "$name: the server did not start (t=$SECONDS)"; tail -c 300 "$O/serve-$name.log"
fi
pkill -TERM -x headroom; wait $sp 2>/dev/null
python3 docs/perf/data/serving-s17/call1/sum.py "$O/ncu-$name.csv" > "$O/sum-$name.txt" 2>&1
head -24 "$O/sum-$name.txt" | cut -c1-110
pack_outputs call6
echo "done (t=$SECONDS)"
