#!/usr/bin/env bash
# On the GPU machine, in one call: the correctness checks of every route,
# dtype and head dim (`headroom kernels check`: fresh random inputs, NaN-poisoned
# outputs, f64 CPU reference, NaN propagation), then compute-sanitizer memcheck
# on small fused and composed cases. Results go to $OUT (or ./gpu-out).
# Usage: bench/gpu/check_attention.sh [path/to/headroom]
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/headroom}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
status=0

echo "=== kernel artifact gate on this machine ==="
ART=$(mktemp -d)
"$BIN" kernels build --arch sm_90a --out "$ART" && "$BIN" kernels verify "$ART" || status=1

echo "=== correctness: headroom kernels check ==="
timeout 240 "$BIN" kernels check --json "$OUT/check.json" || status=1

echo "=== compute-sanitizer memcheck (small cases) ==="
if command -v compute-sanitizer >/dev/null; then
    for f in "fused bf16 d256 q5 kv70" "fused f16 d64 q5 kv70" "composed:0 f16 d128"; do
        timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN" kernels check --filter "$f" 2>&1 | tail -n 4
        [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "memcheck FAILED: $f"; status=1; }
    done
else
    echo "compute-sanitizer not found"; status=1
fi
echo "check_attention: status $status"
exit $status
