#!/usr/bin/env bash
# Prepared in session 33: the first GPU run of branch fp8ws (the
# warp-specialised FP8 grouped GEMMs, moe_grouped_gemm_ws_fp8.cu; built and
# compiled without spills in session 33, never run). Any sm_90a card.
# Build here:
#   git worktree add /tmp/fp8ws fp8ws && (cd /tmp/fp8ws && bash bench/gpu/pack_bins.sh \
#     "$OLDPWD/.devbin/fp8ws" headroom-cuda:fp8_grouped headroom-cuda:fp8_backend)
#   bash bench/gpu/pack_bins.sh .devbin/next headroom-cuda:fp8_grouped   (main)
# carry [".devbin/fp8ws", ".devbin/next"]; ≈ 300 s.
# 1. fp8_grouped on fp8ws: the f64 checks, and every case forced on each
#    family with the warp-specialised output bit for bit the tile kernels'
#    (hidden 256 / 384, 8-16 experts, 33 ... 4,096 tokens and two passes).
#    A hang is a producer / consumer bug (mbarrier phases): the timeouts
#    stop it.
# 2. compute-sanitizer memcheck on one forced-ws case (TMA boxes, the tile
#    table, the unit counters).
# 3. fp8_grouped timing on main and fp8ws: `fp8 tiles` vs `fp8
#    warp-specialised` at 512 / 2,048 / 8,192 tokens (prediction: ws 1.3-1.6x
#    the tiles' GEMM rate at 8,192, slower at 512; set FP8_WS_PAIRS from it).
# 4. If 1-2 pass: greedy ids of the FP8 35B equal session 32's, and W1 FP8
#    main vs fp8ws.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in fp8ws next; do mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
SECONDS=0
timeout 120 /tmp/fp8ws/h/fp8_grouped --ignored --test-threads 1 --skip timing > "$O/fp8_grouped-ws.txt" 2>&1
rc=$?; echo "fp8ws fp8_grouped rc $rc (t=$SECONDS)"; grep -E "test result|panicked|differ" "$O/fp8_grouped-ws.txt" | head -8
timeout 120 compute-sanitizer --tool memcheck /tmp/fp8ws/h/fp8_grouped --ignored --exact \
  more_tokens_than_one_pass_are_run_in_chunks > "$O/memcheck-ws.txt" 2>&1
echo "memcheck rc $? (t=$SECONDS)"; grep -E "ERROR SUMMARY|test result" "$O/memcheck-ws.txt" | head -3
for v in next fp8ws; do
  timeout 90 /tmp/$v/h/fp8_grouped --ignored --exact timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms --nocapture \
    > "$O/timing-$v.txt" 2>&1
  echo "timing $v rc $?"; grep fp8_grouped_timing "$O/timing-$v.txt" | sed 's/dequant.*bf16 grouped [0-9.]* ms ([0-9]*),//' | cut -c1-200
done
[ $rc -eq 0 ] || exit 0
timeout 100 /tmp/fp8ws/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-ws.jsonl" > /dev/null 2>&1
python3 - "$O/fp-ws.jsonl" docs/perf/data/serving-s32/call4/fp-s32d.jsonl <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
try: a = ids(sys.argv[1])
except Exception as e: a = repr(e)
print("fingerprint fp8ws equal to session 32's:", a == ids(sys.argv[2]))
PY
source docs/perf/data/serving-s31/w1_arm.sh  # w1 ARM BIN MODEL PORT
for v in next fp8ws; do w1 fp8-$v /tmp/$v/h/headroom qwen3.6-35b-a3b-fp8 8971; done
rm -f "$O"/w1-*.txt
