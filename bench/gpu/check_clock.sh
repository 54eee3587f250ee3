#!/usr/bin/env bash
# On the GPU machine: the SM clock and power that `bench ttft` samples through NVML
# (crates/hardware/src/nvml.rs, gpu_clock.rs; the bench's `clock` field). Runs a
# short `bench ttft --backend cuda` on a tiny synthetic model and checks its JSON:
# every length has a clock with samples, an SM clock between 100 and 5,000 MHz,
# power above 0, a limit of 50 W or more, and energy above 0 where counted;
# then `serve` on the same model under a short `bench serve` (the server's
# /metrics GPU lines: the report's gpu with samples, clock and joules per
# generated token); doctor's reading of the device; and, when BIN_DIR holds the hardware crate's unit-test binary
# (headroom_hardware-*, from `cargo test --release -p headroom-hardware --lib
# --no-run`), its NVML test (`--ignored nvml`).
# Usage: bench/gpu/check_clock.sh BIN_DIR   (BIN_DIR/headroom: the release binary)
# Results go to $OUT (or ./gpu-out): clock.json, clock-serve.json, clock.log.
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
    j = r["joules_per_run"]
    assert (j is None) == (c["energy_j"] is None) and (j is None or j > 0), r
    print(f"check_clock: {r['tokens']} tokens: ok ({c['samples']} samples)")
PY
# The server's GPU lines under load: a short `bench serve` against `serve` on the same model;
# its report's gpu must have samples, a clock and energy per generated token.
"$BIN_DIR/headroom" serve --backend cuda --synthetic tiny-d256 --port 8979 > "$OUT/clock-serve.log" 2>&1 &
sp=$!
source bench/gpu/serve_wait.sh
serve_listening "$OUT/clock-serve.log" $sp 400 || echo "check_clock: the server did not start"
timeout 120 "$BIN_DIR/headroom" bench serve --url http://127.0.0.1:8979 --concurrency 8 --requests 64 \
    --prompt-len 256 --max-tokens 64 --sample-ms 100 --json "$OUT/clock-serve.json" 2>&1 \
    | tee -a "$OUT/clock.log" | grep -E "output tok/s|^gpu:"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
kill -TERM $sp 2>/dev/null; wait $sp 2>/dev/null
grep -E "GPU clock|NVML" "$OUT/clock-serve.log"
python3 - "$OUT/clock-serve.json" <<'PY' || status=1
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
g = run["gpu"]
assert g is not None, "bench serve: no gpu in the report"
assert g["samples"] >= 2 and 100 <= g["sm_clock_mhz_min"] <= g["sm_clock_mhz_mean"] <= 5000, g
assert g["energy_j"] is None or (g["energy_j"] > 0 and g["joules_per_output_token"] > 0), g
print(f"check_clock: serve: ok ({g['samples']} samples, {g['joules_per_output_token']} J per generated token)")
PY
# doctor's reading of the device (its JSON's backends.cuda_gpu_now).
"$BIN_DIR/headroom" doctor --json > "$OUT/clock-doctor.json" 2>> "$OUT/clock.log" || status=1
python3 - "$OUT/clock-doctor.json" <<'PY' || status=1
import json, sys
b = json.load(open(sys.argv[1]))["backends"]
g = b["cuda_gpu_now"]
assert g is not None, f"doctor: no GPU reading ({b['cuda_gpu_now_unavailable']})"
assert 100 <= g["sm_clock_mhz"] <= 5000 and g["power_w"] > 0 and g["power_limit_w"] >= 50, g
print(f"check_clock: doctor: ok ({g})")
PY
T=$(ls "$BIN_DIR"/lib_headroom_hardware "$BIN_DIR"/headroom_hardware-* 2>/dev/null | grep -v '\.d$' | head -n1)
if [ -n "$T" ]; then
    timeout 60 "$T" --ignored --nocapture nvml 2>&1 | tee -a "$OUT/clock.log" | grep -E "gpu_clock|test result|panicked"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
echo "check_clock: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
