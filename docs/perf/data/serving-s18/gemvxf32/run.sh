#!/usr/bin/env bash
# Branch gemvxf32 (not run, not merged): the one-row, one-output-a-unit GEMVs (bf16 gemv_c1_r1: all
# 80 projections of a bf16 decode step; fp8_gemv_c1_r1: the FP8 preset's out_proj / o_proj) stage
# x's row as f32 in shared memory once a CTA (stage_x, after the PDL wait; 32 KiB static, k <= 8192,
# else the old path) and their loops read it there instead of converting bf16 x per unit and chunk:
# one instruction a weight fewer. Same values in the same order, so the same bits (new tests: a
# row's outputs at one row equal its row's in a launch of more rows). NVRTC 13.0 sm_90a: no spills;
# fp8_gemv_c2_r1 keeps the old path (it spilled staged; two outputs a unit already share each
# conversion) and its code moved in 25 instructions of 2,272 (scheduling only).
# Prediction: bf16 GEMV at one row -3-8 % if issue-bound at all (call 6: 80 x 11.7 us = 0.94 ms,
# 31 % of the bf16 step), FP8 c1_r1 -8-12 %; decode after 2k bf16 +1-3 %, FP8 +1-2 %.
# Build into .devbin/gx-{main,branch}/bins.tar.xz: headroom; for the branch also the gemv and
# fp8_ops (headroom-cuda) and cuda_engine (headroom-engine) test binaries; main's gemv and fp8_ops
# too (timing baselines).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/gx-main; B=/tmp/gx-branch; mkdir -p $A $B
tar -xJf .devbin/gx-main/bins.tar.xz -C $A; tar -xJf .devbin/gx-branch/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
timeout 200 $B/gemv --ignored --test-threads 1 --skip bench --skip timing 2>&1 | grep -E "test result|panicked|FAILED|differs"
timeout 150 $B/fp8_ops --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED|differs"
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 6 $B/gemv --ignored --exact small_case_for_memcheck 2>&1 | grep -E "ERROR SUMMARY|test result"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result"
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompt "the same prompt for both" \
    --max-tokens 64 --json "$O/gen-$side.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print('same tokens' if a==b else 'TOKENS DIFFER', a[:8], b[:8])" "$O/gen-A.json" "$O/gen-B.json"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 100 $d/gemv --ignored --nocapture --exact bench_gemv_vs_cublas 2>&1 | grep -E "rows 1 " | head -6 | sed -E "s/^/$side$run /"
  for m in qwen3.6-35b-a3b qwen3.6-35b-a3b-fp8; do
    timeout 150 $d/headroom bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --decode 64 \
      2>&1 | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$m $side$run /"
  done
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
