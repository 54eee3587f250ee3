#!/usr/bin/env bash
# Session 45, call 1 (carry [".devbin/gdn", ".devbin/gp", ".devbin/gp2", ".devbin/probe"]):
# session 44's call4.sh, call5.sh and call3.sh in one call, trimmed to the
# device time left after eight refused starts (974 s): W1 runs only if time
# remains. Binaries: gdn = main b98326f; gp / gp2 = branches gdnpersist /
# gdnpersist2 rebased on b98326f; probe = branch dramprobe rebased on b98326f
# (pack commands: docs/perf/data/serving-s44/next/README.md).
# Predictions (written in session 44, before any run): the persistent arms'
# GPU tests pass; at 512 sequences main's ≈ 576 µs a launch → gp 500–540
# (−5 to −13 %), gp2 490–530 (−8 to −15 %); 1–8 sequences the same (main's
# entry); 16–64 −10 to +10 %. dram_probe: contiguous 4.0–4.4 TB/s; rows at a
# 4,096-byte pitch −5 to −15 % of contiguous, at 2,048 −3 to −10 %. ncu of
# main's step at 512: DRAM 75–87 % of peak, achieved occupancy ≤ 50 %, long
# scoreboard the largest stall. W1 FP8 +0.5 to +2 % with the faster arm.
source bench/gpu/call_prelude.sh gdn gp gp2 probe
for v in gp gp2; do
  (cd "$O" && timeout 100 /tmp/$v/h/fused_decode --ignored --test-threads 1 gdn_core > "$O/fused_decode-$v.txt" 2>&1; \
    echo "fused_decode $v rc $? (t=$SECONDS)")
  grep -E "^test |test result" "$O/fused_decode-$v.txt" | cut -c1-150
done
for v in gdn gp gp2 gdn gp gp2; do
  (cd "$O" && timeout 90 /tmp/$v/h/gdn_decode_timing --ignored --nocapture >> "$O/timing-$v.txt" 2>&1)
  echo "timing $v rc $? (t=$SECONDS)"
  grep -E "^gdn_decode_timing:" "$O/timing-$v.txt" | tail -8 | grep -E "n=(1|8|16|64|256|512):" | cut -c1-140
done
best=$(for v in gp gp2; do
  grep -E "^gdn_decode_timing: n=512:" "$O/timing-$v.txt" | sed -E 's/.*stream ([0-9.]+) us.*/\1/' |
    awk -v v=$v '{s += $1; n++} END {if (n) print s / n, v}'
done | sort -n | head -1 | cut -d' ' -f2)
echo "faster persistent arm at 512: ${best:-none}"
(cd "$O" && timeout 100 /tmp/probe/h/dram_probe --ignored --nocapture > "$O/probe.txt" 2>&1)
echo "dram_probe rc $? (t=$SECONDS)"
grep -E "^dram_probe:" "$O/probe.txt" | cut -c1-120
T=/tmp/gdn/h/gdn_decode_timing
if [ $SECONDS -lt 300 ]; then
  timeout 120 ncu --kernel-name gdn_decode_step_bf16 --launch-skip $((7 * 233 + 3)) --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
    --section LaunchStats --section SchedulerStats \
    $T --ignored --nocapture > "$O/ncu512.txt" 2>&1; echo "ncu rc $? (t=$SECONDS)"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Warp Cycles Per Issued|No Eligible|Stall|Max Bandwidth|L2 Hit" "$O/ncu512.txt" | cut -c1-140 | head -30
fi
source docs/perf/data/serving-s31/w1_arm.sh
ran_main=no
# SKIP_W1=1: no W1 runs (a call with little device time left).
[ -z "${SKIP_W1:-}" ] && [ -n "$best" ] && [ $SECONDS -lt 280 ] && { w1 gdn /tmp/gdn/h/headroom qwen3.6-35b-a3b-fp8 8481; ran_main=yes; }
[ $ran_main = yes ] && [ $SECONDS -lt 420 ] && w1 "$best" "/tmp/$best/h/headroom" qwen3.6-35b-a3b-fp8 8482
pack_outputs call1
echo "done (t=$SECONDS)"
