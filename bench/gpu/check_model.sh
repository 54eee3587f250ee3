#!/usr/bin/env bash
# On the GPU machine: the whole Qwen3.5/3.6 forward on CUDA against the
# transformers logits of the repository's fixtures (which the CPU backend
# reproduces to <= 1e-4 in f32, crates/model/tests/parity_transformers.rs).
# Every fixture (dense, MoE d64/d256, Qwen3-Next), prompts of 40 and 300
# tokens, both attention routes, one pass and chunks of 64, 37 and 1
# (token-by-token decode through the recurrent GDN step); bar: relative
# Frobenius error <= 2e-2 with bf16 weights and activations.
# For context each line also shows `bf16w`: the CPU backend (f32 math) on the
# same weights rounded to bf16 vs transformers — the error of the weight
# rounding alone — and `vs-cpu-bf16w`: CUDA against that CPU run (the error
# the bf16 activations and the CUDA kernels add).
# Usage: bench/gpu/check_model.sh [path/to/headroom]   (results in $OUT or ./gpu-out)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/headroom}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
FIX=crates/model/tests/fixtures
TMP=$(mktemp -d)
pass=0; fail=0
for fx in dense_d64 moe_d64 moe_d256 next_d128; do
  python3 bench/gpu/round_bf16.py "$FIX/$fx" "$TMP/bf16w-$fx"
  for n in 40 300; do
    base="$TMP/cpu-bf16w-$fx-$n.safetensors"
    "$BIN" logits --backend cpu --model "$TMP/bf16w-$fx" --ids "$FIX/$fx/ids_$n.json" --out "$base" >/dev/null 2>&1
    bf16w=$(python3 bench/gpu/compare_logits.py "$base" "$FIX/$fx/logits_$n.safetensors" 1 | cut -d' ' -f1)
    for route in fused composed; do
      if [ "$route" = fused ]; then ctl=(--attn-execution fused); else ctl=(--attn-execution fallback --attn-query-block 16); fi
      for chunk in none 64 37 1; do
        [ "$chunk" = 1 ] && [ "$n" = 300 ] && continue
        c=(); [ "$chunk" != none ] && c=(--chunk "$chunk")
        out="$TMP/$fx-$n-$route-$chunk.safetensors"
        if "$BIN" "${ctl[@]}" logits --backend cuda --model "$FIX/$fx" --ids "$FIX/$fx/ids_$n.json" --out "$out" "${c[@]}" >"$TMP/log" 2>&1; then
          res=$(python3 bench/gpu/compare_logits.py "$out" "$FIX/$fx/logits_$n.safetensors" 2e-2); rc=$?
          vs=$(python3 bench/gpu/compare_logits.py "$out" "$base" 1 | cut -d' ' -f1)
          res="$res | bf16w $bf16w | vs-cpu-bf16w $vs"
        else
          res="headroom failed: $(tail -n 2 "$TMP/log" | tr '\n' ' ')"; rc=1
        fi
        echo "$fx n=$n $route chunk=$chunk: $res"
        if [ $rc -eq 0 ]; then pass=$((pass+1)); else fail=$((fail+1)); fi
      done
    done
  done
done | tee "$OUT/check_model.txt"
p=$(grep -c ' ok ' "$OUT/check_model.txt"); t=$(wc -l < "$OUT/check_model.txt")
echo "check_model: $p of $t cases within 2e-2"
[ "$p" -eq "$t" ]
