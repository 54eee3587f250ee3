#!/usr/bin/env bash
# Session 18, call 1: branches attnpdl + normrow merged on main (scratch branch s18a), never run
# before. Binaries (.devbin/s18c1/bins.tar.xz): A = main df98b53 headroom; B = s18a headroom and
# the test binaries paged_attention, attention_split, backend_ops, decode_moe (headroom-cuda) and
# cuda_engine (headroom-engine), all `--release`.
# Correctness: the branches' tests, the engine's invariance figures, the random mixed batch's
# fingerprint (paged_attention prints it; session 16: 3ec80cb7a47b2b31) and generate's greedy ids
# A against B. Speed: bench ttft --lengths 2048,32768 --decode 64, A B A B.
# Prediction: decode after 2k +1-2 % (attnpdl 0.5-1 %, normrow 0 ± 0.5 %), TTFT flat.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
T=/tmp/s18c1; mkdir -p $T && tar -xJf .devbin/s18c1/bins.tar.xz -C $T
A=$T/A; B=$T/B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
echo "=== tests (B)"
timeout 200 $B/paged_attention --ignored --nocapture --test-threads 1 2>&1 | grep -E "fingerprint|test result|panicked"
timeout 120 $B/attention_split --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
timeout 60 $B/backend_ops --ignored --exact dense::f32_residual_add_norm_matches_f64 2>&1 | grep -E "test result|panicked"
timeout 150 $B/decode_moe --ignored --test-threads 1 --skip timing 2>&1 | grep -E "test result|panicked|FAILED"
timeout 200 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result|panicked"
echo "=== greedy ids A vs B"
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompt "the same prompt for both" \
    --max-tokens 64 --json "$O/gen-$side.json" > "$O/gen-$side.log" 2>&1; echo "generate $side rc $?"
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print('same tokens' if a==b else 'TOKENS DIFFER', a[:8], b[:8])" "$O/gen-A.json" "$O/gen-B.json"
echo "=== bench ttft A B A B"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 150 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 \
    --json "$O/ttft-$side$run.json" 2>&1 | grep -E "TTFT" | sed -E "s/^/$side$run /"
done; done
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
