#!/usr/bin/env bash
# On the GPU machine (H200, sm_90a), in one call: the correctness tests the
# step256 changes touch (the MoE routing with its offsets and the scatter, the
# shared combine, both paged split combines, the GDN conv strips) and then the
# timings of the 256-row follow-up step's ops (crates/cuda/tests/step256_timing.rs):
# the paged attention over 32k by split count and combine, decode attention of
# 1-256 sequences, the MoE routing and combine stages at 256 / 2k / 8k rows, the conv.
# The correctness runs skip the suites' benches (bench_*). Logs go to $OUT (or ./gpu-out).
# Usage:
#   bench/gpu/step256.sh --collect DIR   # here: build the test binaries, copy them to DIR
#   bench/gpu/step256.sh DIR             # there: run the binaries in DIR
#   bench/gpu/step256.sh                 # there, with cargo: build and run
set -uo pipefail
cd "$(dirname "$0")/../.."
TESTS="moe paged_attention attention_split backend_ops step256_timing"
latest() { ls -t target/release/deps/"$1"-* 2>/dev/null | grep -v '\.d$' | head -n1; }
if [ "${1:-}" = "--collect" ]; then
    DIR=${2:?usage: --collect DIR}
    mkdir -p "$DIR"
    cargo test --release -p headroom-cuda $(printf -- '--test %s ' $TESTS) --no-run || exit 1
    for t in $TESTS; do cp "$(latest "$t")" "$DIR/$t" || exit 1; done
    ls -la "$DIR"
    exit 0
fi
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
if [ -n "${1:-}" ]; then
    bin() { echo "$1/$2"; }
else
    cargo test --release -p headroom-cuda $(printf -- '--test %s ' $TESTS) --no-run 2>&1 | tail -n 2
    bin() { latest "$2"; }
fi
status=0
for t in moe paged_attention attention_split backend_ops; do
    echo "=== $t ==="
    timeout 900 "$(bin "${1:-}" "$t")" --ignored --skip bench_ --test-threads=1 2>&1 | tee "$OUT/$t.log" \
        | grep -E "^test |test result|panicked|rel err" | tail -n 60
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$t FAILED"; status=1; }
done
echo "=== step256_timing ==="
timeout 600 "$(bin "${1:-}" step256_timing)" --ignored --nocapture --test-threads=1 2>&1 \
    | tee "$OUT/step256_timing.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "step256_timing FAILED"; status=1; }
echo "step256: status $status"
exit $status
