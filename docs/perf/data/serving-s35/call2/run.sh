#!/usr/bin/env bash
# Session 35, call 2: branch fp8ws with the empty-mbarrier fix (b7a800e:
# one arrival an MMA warp). Any sm_90a card.
# Build here: (cd /tmp/fp8ws && bash bench/gpu/pack_bins.sh "$OLDPWD/.devbin/fp8wsfix" \
#   headroom-cuda:fp8_grouped headroom-cuda:moe); .devbin/next is main's build.
# carry [".devbin/fp8wsfix", ".devbin/next"].
# 1. fp8_grouped (f64 checks, every case on both families with the same bits,
#    the skew test with 200 runs of a hashed routing over 256 experts).
# 2. moe (the bf16 grouped GEMMs, the ws kernels forced, f64 reference).
# 3. The FP8 35B's greedy ids against session 32's (one engine start).
# 4. Eight server starts (call 1: 3 of 10 hung on fp8ws-watch).
# 5. Time left: W1 FP8, main then the fix.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in fp8wsfix next; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
SECONDS=0
timeout 200 /tmp/fp8wsfix/h/fp8_grouped --ignored --test-threads 1 --skip timing --nocapture > "$O/fp8_grouped.txt" 2>&1
echo "fp8_grouped rc $? (t=$SECONDS)"; grep -E "fp8 ws under skew|test result|panicked|differ|hang" "$O/fp8_grouped.txt" | head -14
timeout 150 /tmp/fp8wsfix/h/moe --ignored --test-threads 1 --skip bench_ > "$O/moe.txt" 2>&1
echo "moe rc $? (t=$SECONDS)"; grep -E "test result|panicked" "$O/moe.txt" | head -4
timeout 120 /tmp/fp8wsfix/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-fix.jsonl" > "$O/gen.log" 2>&1
echo "generate rc $? (t=$SECONDS)"
python3 - "$O/fp-fix.jsonl" docs/perf/data/serving-s32/call4/fp-s32d.jsonl <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
try: a = ids(sys.argv[1])
except Exception as e: a = repr(e)
print("fingerprint equal to session 32's:", a == ids(sys.argv[2]))
PY
source docs/perf/data/serving-s31/w1_arm.sh  # serve_listening, w1
hung=0
for n in 1 2 3 4 5 6 7 8; do
  /tmp/fp8wsfix/h/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8971 > /tmp/s$n.log 2>&1 &
  sp=$!; ok=0
  serve_listening /tmp/s$n.log $sp 180 && ok=1
  [ $ok = 1 ] || { hung=$((hung+1)); nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; kill -9 $sp; }
  kill -TERM $sp 2>/dev/null; wait $sp 2>/dev/null
  echo "start $n: listening=$ok t=$SECONDS"
done
echo "starts that did not listen: $hung of 8"
[ $SECONDS -lt 360 ] || exit 0
for v in next fp8wsfix; do w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971; done
rm -f "$O"/w1-*.txt
