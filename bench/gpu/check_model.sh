#!/usr/bin/env bash
# On the GPU machine: the whole Qwen3.5/3.6 forward on CUDA against the CPU
# backend, on the repository's transformers fixtures (dense d64, MoE d64/d256,
# Qwen3-Next d128), prompts of 40 and 300 tokens, both attention routes
# (fused; composed qL=16), one pass, chunks of 64 and 37, and decode one
# token at a time (chunk 1: the recurrent GDN step).
#
# Issue 8's bar, per case: relative Frobenius error of the logits <= 2e-2
# between CUDA (bf16 weights and activations) and the CPU backend in f32 on
# the same bf16-rounded weights — the matrices rounded as the CUDA backend
# stores them, vectors (norms, A_log, dt_bias, conv) f32 as there
# (bench/gpu/round_bf16.py; headroom-cpu `Precision::BF16_WEIGHTS`).
# Each line: `bar` (that error, PASS/FAIL), `vs-transformers` (CUDA against
# the fixture's transformers f32 logits) and, per fixture and prompt, the CPU
# baseline's own distance to transformers (`cpu-bf16w-vs-tf`: the weight
# rounding alone). The bf16 emulation on the CPU predicts the bar column
# (crates/model/tests/bf16_emulation.rs; docs/perf/cuda-model.md).
# Usage: bench/gpu/check_model.sh [path/to/headroom]   (results in $OUT or ./gpu-out)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/headroom}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
FIX=crates/model/tests/fixtures
TMP=$(mktemp -d)
TOL=2e-2
cmp() { python3 bench/gpu/compare_logits.py --value "$@"; }
for fx in dense_d64 moe_d64 moe_d256 next_d128; do
  python3 bench/gpu/round_bf16.py "$FIX/$fx" "$TMP/bf16w-$fx"
  for n in 40 300; do
    base="$TMP/cpu-bf16w-$fx-$n.safetensors"
    if ! "$BIN" logits --backend cpu --model "$TMP/bf16w-$fx" --ids "$FIX/$fx/ids_$n.json" --out "$base" >"$TMP/log" 2>&1; then
      echo "$fx n=$n: CPU baseline failed: $(tail -n 2 "$TMP/log" | tr '\n' ' ') FAIL"
      continue
    fi
    tf="$FIX/$fx/logits_$n.safetensors"
    base_tf=$(cmp "$base" "$tf" 1)
    for route in fused composed; do
      if [ "$route" = fused ]; then ctl=(--attn-execution fused); else ctl=(--attn-execution fallback --attn-query-block 16); fi
      for chunk in none 64 37 1; do
        c=(); [ "$chunk" != none ] && c=(--chunk "$chunk")
        out="$TMP/$fx-$n-$route-$chunk.safetensors"
        if "$BIN" "${ctl[@]}" logits --backend cuda --model "$FIX/$fx" --ids "$FIX/$fx/ids_$n.json" --out "$out" "${c[@]}" >"$TMP/log" 2>&1; then
          bar=$(cmp "$out" "$base" "$TOL") && verdict=PASS || verdict=FAIL
          res="bar $bar $verdict | vs-transformers $(cmp "$out" "$tf" 1) | cpu-bf16w-vs-tf $base_tf"
        else
          res="headroom failed: $(tail -n 2 "$TMP/log" | tr '\n' ' ') FAIL"
        fi
        echo "$fx n=$n $route chunk=$chunk: $res"
      done
    done
  done
done | tee "$OUT/check_model.txt"
p=$(grep -c ' PASS ' "$OUT/check_model.txt"); t=$(wc -l < "$OUT/check_model.txt")
echo "check_model: $p of $t cases within $TOL of the CPU f32 run on bf16 weights" | tee -a "$OUT/check_model.txt"
# The same bar applied to the reference itself, in the same call: transformers
# in bf16 against transformers in f32 on the bf16-rounded matrices, with the
# MoE routing flips counted (bench/gpu/reference_bf16_spread.py).
python3 bench/gpu/reference_bf16_spread.py --out "$OUT/reference-bf16-spread.json" 2>/dev/null \
  | sed 's/^/reference /' | tee "$OUT/reference_bf16_spread.txt" \
  || echo "reference: transformers bf16 spread not measured (needs torch + transformers)"
[ "$p" -eq "$t" ]
