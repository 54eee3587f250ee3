#!/usr/bin/env bash
# Session 17, call 4. Before = e562597 (call 3's after: .devbin/s17c), after = 90d4f1b
# (.devbin/s17d: the GDN decode step's state loaded before the wait for the previous kernel;
# with the fused_decode and cuda_engine test binaries). (1) the fused GDN decode tests and
# memcheck; the engine's 255-others tests (a changed figure would mean the early loads read
# something a kernel of the step writes); (2) batch-1 decode before / after / before / after
# (bench ttft --lengths 2048,32768 --decode 64), then the FP8 preset once each.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/s17c; B=/tmp/s17d; mkdir -p $A $B
tar -xJf .devbin/s17c/bins.tar.xz -C $A; tar -xJf .devbin/s17d/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== (1) tests, after"
timeout 150 $B/fused_decode --ignored --test-threads 1 2>&1 | grep -E "test result|FAILED|panicked" | head -5
timeout 120 compute-sanitizer --tool memcheck --print-limit 6 --error-exitcode 9 $B/fused_decode --ignored --exact gdn_core_fused_small_gqa_1_2_3 2>&1 | grep -E "ERROR SUMMARY|test result"
timeout 200 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others > "$O/engine.txt" 2>&1; echo "cuda_engine rc $? (the default-mode 255-others test fails at its known 1.48e-2)"
grep -E "worst|test result|panicked at" "$O/engine.txt" | head -12
echo "=== (2) batch-1 decode, A B A B (bf16), then A B (FP8)"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 200 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-bf16-$side$run.json" > "$O/ttft-bf16-$side$run.txt" 2>&1
  echo "$side$run bf16: $(grep -E 'tokens' "$O/ttft-bf16-$side$run.txt" | sed -E 's/ +peak.*decode/ decode/' | tr -s ' ' | tr '\n' '|')"
done; done
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 200 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-fp8-$side.json" > "$O/ttft-fp8-$side.txt" 2>&1
  echo "$side fp8: $(grep -E 'tokens' "$O/ttft-fp8-$side.txt" | sed -E 's/ +peak.*decode/ decode/' | tr -s ' ' | tr '\n' '|')"
done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
