#!/usr/bin/env bash
# Session 33, call 2 (H100; call 1 and the H200 call were refused a machine).
# Binaries: s33m = main d02bee9 (headroom, fp8_grouped), s33t = main d02bee9
# (fp8_backend), s33a = branch actcodes 753cb38 (headroom, fp8_grouped,
# fp8_backend): the FP8 gate+up grouped GEMM writes act's e4m3 codes and
# scales itself (no act quantization launch, no bf16 act).
# 1. main's fp8_backend tests: the checks session 32's last refactor
#    (682c880, the norm launchers) was merged on by reading only.
# 2. s33a: fp8_grouped (f64 checks: ragged experts, two passes) and
#    fp8_backend (the MoE block on FP8 experts); greedy ids of the FP8 35B on
#    serving-s32/fingerprint-prompts.jsonl from main and s33a, equal to
#    session 32's (the same bits predicted: the codes are fp8_quant_bf16's of
#    the same bf16 act).
# 3. fp8_grouped timing (35B shape, 512 / 2,048 / 8,192 tokens), main then
#    s33a. Prediction: native FP8 -8..-15 % at 8,192 tokens (one launch and
#    ~2 KB a pair of act traffic fewer; the gate+up grid halves, its CTAs
#    twice as long).
# 4. W1 FP8, main then s33a, fresh servers. Prediction: +1-2 % output tok/s.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in s33m s33t s33a; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
t() { echo "  (t=$SECONDS)"; }
timeout 100 /tmp/s33t/h/fp8_backend --ignored --test-threads 1 --skip timing > "$O/fp8_backend-main.txt" 2>&1
echo "main fp8_backend rc $?"; grep -E "test result|panicked" "$O/fp8_backend-main.txt" | head -5; t
timeout 100 /tmp/s33a/h/fp8_grouped --ignored --test-threads 1 --skip timing > "$O/fp8_grouped-s33a.txt" 2>&1
echo "s33a fp8_grouped rc $?"; grep -E "test result|panicked|worst" "$O/fp8_grouped-s33a.txt" | head -14; t
timeout 100 /tmp/s33a/h/fp8_backend --ignored --test-threads 1 --skip timing > "$O/fp8_backend-s33a.txt" 2>&1
echo "s33a fp8_backend rc $?"; grep -E "test result|panicked" "$O/fp8_backend-s33a.txt" | head -5; t
for v in s33m s33a; do
  timeout 100 /tmp/$v/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
    --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-$v.jsonl" > /dev/null 2>&1
  echo "fingerprint $v rc $?"
done
python3 - "$O" docs/perf/data/serving-s32/call4/fp-s32d.jsonl <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
s32 = ids(sys.argv[2])
for v in ("s33m", "s33a"):
    try: a = ids(f"{sys.argv[1]}/fp-{v}.jsonl")
    except Exception as e: a = repr(e)
    print(f"fingerprint {v} equal to session 32's: {a == s32}")
PY
t
for v in s33m s33a; do
  timeout 60 /tmp/$v/h/fp8_grouped --ignored --exact timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms --nocapture \
    > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $?"; grep fp8_grouped_timing "$O/timing-$v.txt" | cut -c1-160
done; t
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
cap() { grep -o "up to [0-9]* running\|measured [0-9]*)" "$1" | tr '\n' ' '; }
for v in s33m s33a; do w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971; echo "  $(cap "$O/serve-fp8-$v.log")"; done
