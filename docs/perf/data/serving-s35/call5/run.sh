#!/usr/bin/env bash
# Session 35, call 5: the new bf16 ws test under the engine's calibration routing
# (crates/cuda/tests/moe/ws.rs, 200 runs, each caught if still running after 10 s)
# on main's kernels before the fix (moe-old: 434ace2 + the new test) and after
# (moe: main 917696c), and the FP8 skew test on main after the merge.
# carry [".devbin/s35t"] (h/moe-old, h/moe, h/fp8_grouped).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
mkdir -p /tmp/t && tar -xJf .devbin/s35t/bins.tar.xz -C /tmp/t
nvidia-smi --query-gpu=name --format=csv,noheader
SECONDS=0
for b in moe-old moe moe-old; do
  timeout 150 /tmp/t/h/$b --ignored --exact --nocapture ws::ws_finishes_with_the_same_bits_under_the_calibration_routing \
    > "$O/$b.txt" 2>&1
  echo "$b rc $? (t=$SECONDS)"; grep -E "runs finished|hang|differences|test result|panicked" "$O/$b.txt" | head -4
done
timeout 120 /tmp/t/h/fp8_grouped --ignored --exact --nocapture \
  warp_specialised_fp8_gemms_finish_and_match_the_tiles_under_skewed_routings > "$O/skew.txt" 2>&1
echo "skew rc $? (t=$SECONDS)"; grep -E "hashed|test result|panicked|hang" "$O/skew.txt" | head -3
