#!/usr/bin/env bash
# Branch attnpdl (not run, not merged): the paged attention and its two combines launched
# programmatically — each waits for the previous kernel first, then lets the next kernel's CTAs
# start — so the decode chain loses two launch gaps per attention layer (prep -> attention ->
# combine -> o_proj GEMV, whose first weights now load while attention runs).
# Prediction: batch-1 decode after 2k +0.5-1 % (10 layers x 2-3 us of a ~2.77 ms step); TTFT and
# W1 flat. Build both sides into .devbin/apdl-{main,branch}/bins.tar.xz: headroom, and for the
# branch the paged_attention, attention_split (headroom-cuda) and cuda_engine (headroom-engine)
# test binaries. Correctness first: the random mixed batch's fingerprint must equal main's
# (paged_attention prints it), the engine's invariance figures must not move.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/apdl-main; B=/tmp/apdl-branch; mkdir -p $A $B
tar -xJf .devbin/apdl-main/bins.tar.xz -C $A; tar -xJf .devbin/apdl-branch/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
timeout 200 $B/paged_attention --ignored --nocapture --test-threads 1 2>&1 | grep -E "fingerprint|test result|panicked"
timeout 150 $B/attention_split --ignored --test-threads 1 2>&1 | grep -E "test result|panicked"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result"
for run in 1 2; do for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 200 $d/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 2048,32768 --decode 64 2>&1 \
    | grep -E "TTFT" | sed -E "s/ +peak.*decode/ decode/; s/^/$side$run /"
done; done
AB_RUNS=2 AB_LENGTHS= OUT=$O/ab timeout 400 bash bench/gpu/ab_serving.sh $A/headroom $B/headroom 2>&1 | tail -n 3
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
