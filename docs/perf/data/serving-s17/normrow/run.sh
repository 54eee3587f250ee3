#!/usr/bin/env bash
# Branch normrow (not run, not merged): add_rms_norm_quad_f32res compiled through norm_row.cuh,
# the header the MoE decode router's folded norm uses — one copy of the arithmetic instead of two
# (session 17's `duplicates` D2). Its code changes (7,552 -> 8,832 bytes under NVRTC 13.0), so
# check on the H200 that its values do not: the decode_moe test of the folded norm (now header
# against header, so also) the engine's figures and a greedy fingerprint against main's binary.
# Build into .devbin/normrow-{main,branch}/bins.tar.xz: headroom; for the branch also the
# backend_ops, decode_moe (headroom-cuda) and cuda_engine (headroom-engine) test binaries.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
A=/tmp/nr-main; B=/tmp/nr-branch; mkdir -p $A $B
tar -xJf .devbin/normrow-main/bins.tar.xz -C $A; tar -xJf .devbin/normrow-branch/bins.tar.xz -C $B
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
{
timeout 100 $B/backend_ops --ignored --exact dense::f32_residual_add_norm_matches_f64 2>&1 | grep -E "test result|panicked"
timeout 100 $B/decode_moe --ignored --exact the_router_with_the_norm_folded_in_gives_the_two_launches_bits 2>&1 | grep -E "test result|panicked"
timeout 150 $B/cuda_engine --ignored --nocapture --test-threads 1 cuda_request_among_255_others 2>&1 | grep -E "worst|test result"
# Greedy tokens of the 35B synthetic, main then branch: the same ids if the norm's bits held.
for side in A B; do
  d=$([ $side = A ] && echo $A || echo $B)
  timeout 200 $d/headroom generate --backend cuda --synthetic qwen3.6-35b-a3b --prompt "the same prompt for both" \
    --max-tokens 64 --json "$O/gen-$side.json" > /dev/null 2>&1
done
python3 -c "import json,sys; a,b=(json.loads(open(f).readline())['ids'] for f in sys.argv[1:]); print('same tokens' if a==b else 'TOKENS DIFFER', a[:8], b[:8])" "$O/gen-A.json" "$O/gen-B.json"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
