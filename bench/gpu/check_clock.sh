#!/usr/bin/env bash
# On the GPU machine: the SM clock and power that `bench ttft` samples through NVML
# (crates/hardware/src/nvml.rs, gpu_clock.rs; the bench's `clock` field). Runs a
# short `bench ttft --backend cuda` on a tiny synthetic model and checks its JSON:
# every length has a clock with samples, an SM clock between 100 and 5,000 MHz,
# power above 0, a limit of 50 W or more, and energy above 0 where counted;
# and, when BIN_DIR holds the hardware crate's unit-test binary
# (headroom_hardware-*, from `cargo test --release -p headroom-hardware --lib
# --no-run`), its NVML test (`--ignored nvml`).
# Usage: bench/gpu/check_clock.sh BIN_DIR   (BIN_DIR/headroom: the release binary)
# Results go to $OUT (or ./gpu-out): clock.json, clock.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:?usage: check_clock.sh BIN_DIR}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
source bench/gpu/env.sh
export HEADROOM_KERNEL_CACHE=${HEADROOM_KERNEL_CACHE:-$(mktemp -d)}
status=0
timeout 300 "$BIN_DIR/headroom" bench ttft --backend cuda --synthetic tiny-d256 --lengths 512,4096 \
    --iterations 3 --warmup 1 --json "$OUT/clock.json" 2>&1 | tee "$OUT/clock.log" | grep -E "TTFT|clock|sampling"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
python3 - "$OUT/clock.json" <<'PY' || status=1
import json, sys
rep = json.load(open(sys.argv[1]))
for r in rep["results"]:
    c = r["clock"]
    assert c is not None, f"{r['tokens']} tokens: no clock"
    assert c["samples"] >= 2, c
    assert 100 <= c["sm_mhz_min"] <= c["sm_mhz_mean"] <= c["sm_mhz_max"] <= 5000, c
    assert c["power_w_mean"] > 0 and c["power_limit_w"] >= 50, c
    assert 0 <= c["power_capped_share"] <= 1 and 0 <= c["thermal_share"] <= 1, c
    assert c["energy_j"] is None or c["energy_j"] > 0, c
    print(f"check_clock: {r['tokens']} tokens: ok ({c['samples']} samples)")
PY
T=$(ls "$BIN_DIR"/headroom_hardware-* 2>/dev/null | grep -v '\.d$' | head -n1)
if [ -n "$T" ]; then
    timeout 60 "$T" --ignored --nocapture nvml 2>&1 | tee -a "$OUT/clock.log" | grep -E "gpu_clock|test result|panicked"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
echo "check_clock: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
