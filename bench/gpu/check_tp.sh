#!/usr/bin/env bash
# On the 2-GPU H200 machine: tensor parallelism over NCCL (docs/parallel.md).
#  0. the NCCL collectives and the f32 reduce of TP partials (unit tests, two GPUs)
#     and the one-GPU split tests (tp_split: f32 vs bf16 partials against f64);
#  1. TP=2 vs TP=1 logits (<= 2e-2 relative Frobenius, and the max-norm relative
#     difference max|a-b|/max|b|) on the four repository fixtures (each also against
#     transformers) and on qwen3.6-35b-a3b:layers=4 (512 tokens);
#  2. greedy tokens after a prompt identical at TP=1 and TP=2 on tiny-d256, and the
#     exit code of `generate --tensor-parallel 2` (run 2 died with SIGSEGV at exit);
#  3. the 40-layer 35B-A3B shape, 32k prefill TTFT at TP=1 vs TP=2 (fused
#     attention on both arms), with each rank's comm share (--breakdown);
#  4. qwen3.5-122b-a10b (~244 GB bf16, more than one H200) prefilling 8k at
#     TP=2, with each GPU's peak memory (the backend's and nvidia-smi's).
# Steps 3 and 4 run only while the elapsed time is under TP_BUDGET_S (default 150 s,
# so that a 200 s device call ends cleanly); TP_STEPS (default "0 1 2 3 4") picks steps.
# NCCL comes from the nvidia-nccl-cu13 wheel (libnccl.so.2: linked as libnccl.so).
# Usage: bench/gpu/check_tp.sh [path/to/headroom] [path/to/nccl-test-binary] [path/to/tp_split-test-binary]
#   (test binaries: `cargo test --release -p headroom-cuda --test nccl --test tp_split --no-run`;
#   results in $OUT or ./gpu-out)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/headroom}
NCCL_TEST=${2:-}
SPLIT_TEST=${3:-}
STEPS=${TP_STEPS:-0 1 2 3 4}
BUDGET=${TP_BUDGET_S:-150}
want() { [[ " $STEPS " == *" $1 "* ]]; }
in_budget() { # STEP: within the time budget, else say it is skipped
  if [ "$SECONDS" -lt "$BUDGET" ]; then return 0; fi
  echo "step $1 skipped: ${SECONDS}s elapsed, budget ${BUDGET}s"; return 1
}
# "rel_frob max_rel" of two logits files (max_rel = max|a-b| / max|b|).
diff_logits() {
  python3 - "$1" "$2" <<'PY'
import sys
sys.path.insert(0, "bench/gpu")
import numpy as np
from compare_logits import read
try:
    a, b = read(sys.argv[1]), read(sys.argv[2])
except (OSError, KeyError, ValueError) as e:
    print(f"missing ({type(e).__name__})"); sys.exit(0)
if a.shape != b.shape or not np.isfinite(a).all():
    print("shape/non-finite"); sys.exit(0)
fro = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
mx = np.abs(a - b).max() / max(np.abs(b).max(), 1e-300)
print(f"rel={fro:.3e} max_rel={mx:.3e} {'ok' if fro <= 2e-2 else 'FAIL'}")
PY
}
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

if want 0; then
  step "0. NCCL collectives (crates/cuda/tests/nccl.rs) and the f32 reduce of partials (tp_split.rs)"
  if [ -n "$NCCL_TEST" ]; then
    timeout 60 "$NCCL_TEST" --ignored --test-threads=1 2>&1 | tail -n 6
  fi
  if [ -n "$SPLIT_TEST" ]; then
    timeout 90 "$SPLIT_TEST" --ignored --test-threads=1 --nocapture 2>&1 | grep -v "^$" | tail -n 30
  fi
fi

if want 1; then
  step "1a. fixtures: TP=2 vs TP=1 vs transformers (composed qL=16)"
  for fx in dense_d64 moe_d64 moe_d256 next_d128; do
    for n in 40 300; do
      for tp in 1 2; do
        timeout 60 "$BIN" --attn-execution fallback --attn-query-block 16 logits --backend cuda \
          --model "$FIX/$fx" --ids "$FIX/$fx/ids_$n.json" --out "$TMP/$fx-$n-tp$tp.safetensors" \
          --tensor-parallel $tp >"$TMP/log" 2>&1 || { echo "$fx n=$n tp=$tp FAILED (rc $?): $(tail -n 3 "$TMP/log")"; }
      done
      echo "$fx n=$n tp2-vs-tp1 $(diff_logits "$TMP/$fx-$n-tp2.safetensors" "$TMP/$fx-$n-tp1.safetensors") \
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
  echo "a3b:layers=4 (512 tokens) tp2-vs-tp1 $(diff_logits "$TMP/a3b4-tp2.safetensors" "$TMP/a3b4-tp1.safetensors")"
fi

if want 2; then
  step "2. tiny-d256: greedy tokens (64-token prompt + 32 decoded) TP=1 vs TP=2; generate's exit code"
  for tp in 1 2; do
    timeout 60 "$BIN" --attn-execution fallback bench ttft --backend cuda --synthetic tiny-d256 --lengths 64 \
      --iterations 1 --warmup 0 --decode 32 --tensor-parallel $tp --json "$TMP/greedy-tp$tp.json" >/dev/null 2>"$TMP/log" \
      || echo "greedy tp=$tp FAILED: $(tail -n 3 "$TMP/log")"
  done
  python3 - "$TMP/greedy-tp1.json" "$TMP/greedy-tp2.json" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p))["results"][0]["decode_tokens"] for p in sys.argv[1:3])
except (OSError, KeyError, IndexError, ValueError) as e:
    print("greedy: no result", type(e).__name__); sys.exit(0)
print("greedy tp1", a); print("greedy tp2", b)
same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
print("greedy identical:", a == b and len(a) == 32, f"(first {same} of {len(a)} equal)")
PY
  for tp in 1 2; do
    timeout 60 "$BIN" --attn-execution fallback generate --backend cuda --synthetic tiny-d256 \
      --prompt "The quick brown fox jumps over the lazy dog" --max-tokens 32 --tensor-parallel $tp \
      >"$TMP/gen-tp$tp.txt" 2>&1
    echo "generate tiny-d256 --tensor-parallel $tp: exit code $? (0 expected; 139 = the old SIGSEGV at exit)"
    tail -n 2 "$TMP/gen-tp$tp.txt"
  done
fi

if want 3 && in_budget 3; then
  step "3. 35B-A3B (40 layers) 32k prefill TTFT, TP=1 vs TP=2, fused attention"
  for tp in 1 2; do
    timeout 150 "$BIN" --attn-execution fused bench ttft --backend cuda --synthetic qwen3.6-35b-a3b \
      --lengths 32768 --iterations 2 --warmup 1 --breakdown --tensor-parallel $tp \
      --json "$OUT/ttft-a3b-32k-tp$tp.json" 2>&1 | grep -v "^  32768 tokens, run" | tail -n 40
  done
fi

if want 4 && in_budget 4; then
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
fi
echo "done $(date -u +%T) (${SECONDS}s)"
