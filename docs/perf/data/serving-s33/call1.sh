#!/usr/bin/env bash
# Session 33, call 1 (H100: the needs_h200 start of serving-s32/next/call.sh
# was refused again). Binaries: s33t = main d02bee9 (headroom, fp8_backend,
# fp8_ops test binaries).
# 1. The checks session 32's last host-side refactor (682c880: the norm
#    launchers' args, entry and grid) was merged on by reading only:
#    fp8_backend (norm_codes, the MoE block's shared gate/up; greedy
#    ids of the FP8 35B on serving-s32/fingerprint-prompts.jsonl, to equal
#    serving-s32/call4/fp-s32d.jsonl's.
# 2. serving-s32/next/h100.sh: one FP8 W1 mixed step under ncu, then W1 FP8.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/s33t; mkdir -p $T && tar -xJf .devbin/s33t/bins.tar.xz -C $T
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
timeout 120 $T/h/fp8_backend --ignored --test-threads 1 --skip timing > "$O/fp8_backend.txt" 2>&1
echo "fp8_backend rc $? (t=$SECONDS)"; grep -E "test result|panicked|FAILED" "$O/fp8_backend.txt" | head
timeout 120 $T/h/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 \
  --prompts docs/perf/data/serving-s32/fingerprint-prompts.jsonl --json "$O/fp-s33.jsonl" > /dev/null 2>&1
echo "fingerprint rc $? (t=$SECONDS)"
python3 - "$O/fp-s33.jsonl" docs/perf/data/serving-s32/call4/fp-s32d.jsonl <<'PY'
import json, sys
ids = lambda f: [json.loads(l)["ids"] for l in open(f) if '"ids"' in l]
a, b = ids(sys.argv[1]), ids(sys.argv[2])
print("fingerprint equal to session 32's:", a == b, [x[:3] for x in a])
PY
mkdir -p .devbin/next && cp .devbin/s33t/bins.tar.xz .devbin/next/bins.tar.xz
bash docs/perf/data/serving-s32/next/h100.sh
