#!/usr/bin/env bash
# Session 42, call 8 (any NVIDIA card; ≈ 200 s; carry [".devbin/clock", ".devbin/head"]): clock =
# main's release binary and the hardware crate's library tests, packed by
#   bash bench/gpu/pack_bins.sh .devbin/clock headroom-hardware:lib
# — `bench ttft`'s new clock, power and energy sampling (NVML) on a GPU —
# bench/gpu/check_clock.sh (a tiny model: the JSON's clock fields sane; the NVML unit test),
# then the FP8 35B at 8k and 32k with the clock line.
# Prediction: check_clock passes; on an H100 the 32k runs' clock as call 7's nvidia-smi saw it
# (mean 1,650–1,800 MHz, power-capped in most samples); on an H200 (not yet sampled) the same cap
# (700 W) with a clock 0–5 % higher (HBM3e's lower power per byte); energy ≈ 300–350 J a 32k run
# (the window's joules over its three runs; the host's gaps between runs add a little).
# Then whether the sampling costs anything: the FP8 32k TTFT of main ae32bcf (no sampling; carry
# ".devbin/head" too, packed by pack_bins.sh from a worktree at ae32bcf) and of this build,
# alternating twice. Prediction: equal within the runs' spread (±1 %).
source bench/gpu/call_prelude.sh clock head
OUT=$O bash bench/gpu/check_clock.sh /tmp/clock/h
echo "check_clock rc $? (t=$SECONDS)"
timeout 100 /tmp/clock/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 8192,32768 \
  --iterations 3 --warmup 1 --json "$O/fp8.json" > "$O/fp8.txt" 2>&1
echo "fp8 rc $? (t=$SECONDS)"; grep -E "TTFT|clock" "$O/fp8.txt" | cut -c1-200
if [ -x /tmp/head/h/headroom ]; then
  for v in head clock head clock; do
    timeout 60 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
      --iterations 3 --warmup 1 >> "$O/overhead-$v.txt" 2>&1
    echo "overhead $v rc $? (t=$SECONDS): $(grep -E 'tokens  TTFT' "$O/overhead-$v.txt" | tail -1 | cut -c1-40)"
  done
fi
