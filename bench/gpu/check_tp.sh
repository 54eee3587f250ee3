#!/usr/bin/env bash
# On the 2-GPU H200 machine: tensor parallelism over NCCL (docs/parallel.md).
#  1. TP=2 vs TP=1 logits (<= 2e-2 relative, bf16) on the four repository
#     fixtures (and each against transformers) and on qwen3.6-35b-a3b:layers=4;
#  2. greedy tokens after a prompt identical at TP=1 and TP=2 on tiny-d256;
#  3. the 40-layer 35B-A3B shape, 32k prefill TTFT at TP=1 vs TP=2 (fused
#     attention on both arms), with each rank's comm share (--breakdown);
#  4. qwen3.5-122b-a10b (~244 GB bf16, more than one H200) prefilling 8k at
#     TP=2, with each GPU's peak memory (the backend's and nvidia-smi's).
# NCCL comes from the nvidia-nccl-cu13 wheel (libnccl.so.2: linked as libnccl.so).
# Usage: bench/gpu/check_tp.sh [path/to/headroom] [path/to/nccl-test-binary]
#   (the second: `cargo test --release -p headroom-cuda --test nccl --no-run`; results in $OUT or ./gpu-out)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/headroom}
NCCL_TEST=${2:-}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
LOG="$OUT/tp.log"
exec > >(tee -a "$LOG") 2>&1
source bench/gpu/env.sh
NCCL_DIR=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
[ -z "$NCCL_DIR" ] && NCCL_DIR=$(dirname "$(find / -name 'libnccl.so.2' 2>/dev/null | head -n1)")
LINK=$(mktemp -d)
ln -sf "$NCCL_DIR/libnccl.so.2" "$LINK/libnccl.so"
export LD_LIBRARY_PATH="$LINK:$NCCL_DIR:$LD_LIBRARY_PATH"
export NCCL_DEBUG=WARN
echo "nccl: $NCCL_DIR"; ls "$NCCL_DIR"
nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv
TMP=$(mktemp -d)
FIX=crates/model/tests/fixtures
step() { echo; echo "=== $* ($(date -u +%T))"; }

step "0. NCCL collectives (crates/cuda/tests/nccl.rs)"
if [ -n "$NCCL_TEST" ]; then
  timeout 60 "$NCCL_TEST" --ignored --test-threads=1 2>&1 | tail -n 6
fi

step "1a. fixtures: TP=2 vs TP=1 vs transformers (composed qL=16)"
for fx in dense_d64 moe_d64 moe_d256 next_d128; do
  for n in 40 300; do
    for tp in 1 2; do
      timeout 60 "$BIN" --attn-execution fallback --attn-query-block 16 logits --backend cuda \
        --model "$FIX/$fx" --ids "$FIX/$fx/ids_$n.json" --out "$TMP/$fx-$n-tp$tp.safetensors" \
        --tensor-parallel $tp >"$TMP/log" 2>&1 || { echo "$fx n=$n tp=$tp FAILED: $(tail -n 3 "$TMP/log")"; }
    done
    echo "$fx n=$n tp2-vs-tp1 $(python3 bench/gpu/compare_logits.py "$TMP/$fx-$n-tp2.safetensors" "$TMP/$fx-$n-tp1.safetensors" 2e-2) \
| tp2-vs-hf $(python3 bench/gpu/compare_logits.py "$TMP/$fx-$n-tp2.safetensors" "$FIX/$fx/logits_$n.safetensors" 2e-2) \
| tp1-vs-hf $(python3 bench/gpu/compare_logits.py "$TMP/$fx-$n-tp1.safetensors" "$FIX/$fx/logits_$n.safetensors" 2e-2)"
  done
done

step "1b. qwen3.6-35b-a3b:layers=4 synthetic, 512 tokens: TP=2 vs TP=1 (fused)"
python3 -c "import json; print(json.dumps([(i * 7919) % 248320 for i in range(512)]))" > "$TMP/ids512.json"
for tp in 1 2; do
  timeout 120 "$BIN" --attn-execution fused logits --backend cuda --synthetic qwen3.6-35b-a3b:layers=4 \
    --ids "$TMP/ids512.json" --out "$TMP/a3b4-tp$tp.safetensors" --tensor-parallel $tp 2>&1 | tail -n 3
done
echo "a3b:layers=4 tp2-vs-tp1 $(python3 bench/gpu/compare_logits.py "$TMP/a3b4-tp2.safetensors" "$TMP/a3b4-tp1.safetensors" 2e-2)"

step "2. greedy tokens, tiny-d256, 64-token prompt + 32 decoded"
for tp in 1 2; do
  timeout 60 "$BIN" --attn-execution fallback bench ttft --backend cuda --synthetic tiny-d256 --lengths 64 \
    --iterations 1 --warmup 0 --decode 32 --tensor-parallel $tp --json "$TMP/greedy-tp$tp.json" >/dev/null 2>"$TMP/log" \
    || echo "greedy tp=$tp FAILED: $(tail -n 3 "$TMP/log")"
done
python3 - "$TMP/greedy-tp1.json" "$TMP/greedy-tp2.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["results"][0]["decode_tokens"] for p in sys.argv[1:3])
print("greedy tp1", a); print("greedy tp2", b)
print("greedy identical:", a == b and len(a) == 32)
PY

step "3. 35B-A3B (40 layers) 32k prefill TTFT, TP=1 vs TP=2, fused attention"
for tp in 1 2; do
  timeout 150 "$BIN" --attn-execution fused bench ttft --backend cuda --synthetic qwen3.6-35b-a3b \
    --lengths 32768 --iterations 2 --warmup 1 --breakdown --tensor-parallel $tp \
    --json "$OUT/ttft-a3b-32k-tp$tp.json" 2>&1 | grep -v "^  32768 tokens, run" | tail -n 40
done

step "4. qwen3.5-122b-a10b (~244 GB) at TP=2, 8k prefill, per-GPU peak memory"
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader -lms 500 > "$OUT/smi-122b.csv" &
SMI=$!
timeout 200 "$BIN" --attn-execution fused bench ttft --backend cuda --synthetic qwen3.5-122b-a10b \
  --lengths 8192 --iterations 1 --warmup 0 --breakdown --tensor-parallel 2 \
  --json "$OUT/ttft-122b-8k-tp2.json" 2>&1 | tail -n 40
kill $SMI 2>/dev/null
python3 - "$OUT/smi-122b.csv" <<'PY'
import sys, collections
peak = collections.defaultdict(int)
for line in open(sys.argv[1]):
    try:
        i, m = line.split(",")
        peak[int(i)] = max(peak[int(i)], int(m.split()[0]))
    except ValueError:
        pass
print("nvidia-smi peak MiB per GPU:", dict(peak))
PY
echo "done $(date -u +%T)"
