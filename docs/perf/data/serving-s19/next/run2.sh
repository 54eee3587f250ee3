#!/usr/bin/env bash
# Planned second GPU call of session 20 (not run): branch fp8mma (D) against
# main ece6be5 (A). D runs one-row wide FP8 GEMV launches (the 35B-A3B FP8
# preset's qkv + z and q / gate / k / v projections: >= 4 tiles of 16 outputs
# a SM, whole 128-column blocks, k <= 4096) on the tensor cores:
# fp8_gemv_mma.cu, the e4m3 weights as mma.sync m16n8k16 A (exact to f16),
# x as f16 in B (a power-of-two scale when |x| > 65504), f32 sums, each
# 128-column block scaled in f32 (docs/perf/cuda-fp8.md, session 19). The
# lane / column mapping was emulated against the PTX fragment layout on the
# CPU (crates/cuda/src/ops/fp8/gemv.rs tests); no GPU has run it.
# Binaries in .devbin/s20b/bins.tar.xz (built at the end of session 19 from main
# ece6be5 and fp8mma 8e77047; rebuild if either moved):
# A/headroom, A/fp8_ops; D/headroom, D/fp8_ops, D/fp8_backend, D/cuda_fp8.
# Prediction: correct (fp8_ops' new mma tests vs f64 at 1e-4 of sum|x.w|,
# the others unchanged); the 12288 x 2048 GEMV at one row 9.3 -> 6.5-7.5 us;
# FP8 decode after 2k / 32k +4-7 %; tokens may differ from A (another
# summation order: not the same bits), so compare them, do not require them.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s20b; mkdir -p $T && tar -xJf .devbin/s20b/bins.tar.xz -C $T
A=$T/A; D=$T/D
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (D)"
timeout 200 $D/fp8_ops --ignored --nocapture --test-threads 1 --skip timing 2>&1 | grep -E "^test |SMs|test result|panicked"
timeout 150 $D/fp8_backend --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked"
timeout 100 $D/cuda_fp8 --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $D/fp8_ops --ignored --exact mma::a_nan_or_inf_input_makes_every_output_nan_or_inf_on_the_tensor_cores 2>&1 | grep -E "ERROR SUMMARY"
echo "=== FP8 GEMV timing A D"
for side in A D; do
  timeout 100 $T/$side/fp8_ops --ignored --nocapture --test-threads 1 timing_fp8_gemv_vs_bf16_gemv_at_one_row 2>&1 | grep -E "fp8_timing" | sed "s/^/$side /"
done
echo "=== greedy ids A D (FP8 preset)"
for side in A D; do
  timeout 150 $T/$side/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --prompt "the same prompt for both" \
    --max-tokens 64 --json "$O/gen-$side.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,d=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); n=next((i for i,(x,y) in enumerate(zip(a,d)) if x!=y), len(a)); print('same tokens' if a==d else 'tokens differ from position %d' % n, a[:6], d[:6])" "$O/gen-A.json" "$O/gen-D.json"
echo "=== bench ttft A D A D (FP8)"
for run in 1 2; do for side in A D; do
  timeout 150 $T/$side/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048,32768 --decode 64 \
    2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$side$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
