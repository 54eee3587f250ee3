#!/usr/bin/env bash
# After session 46: the waiting calls in one lease, most valuable first, each behind a time
# guard (carry [".devbin/ga", ".devbin/gb", ".devbin/head", ".devbin/gdn", ".devbin/gp",
# ".devbin/gp2"]; ≈ 27 MB; pack as README.md says). 1. gdnbulk (../call5.sh, ≈ 250 s);
# 2. on an H200 only, the persistent GDN decode grids (../call3.sh's timing and W1 rule,
# ≈ 20 s, + ≈ 110 s if an arm wins); 3. the 32k GEMM stall profile (../call4.sh, ≈ 120 s)
# while ≥ 150 s of the call's 600 are left. Each part packs its own archive.
S0=$(date +%s)
left() { echo $(( 590 - ($(date +%s) - S0) )); }
bash docs/perf/data/serving-s46/call5.sh
echo "== after call 5: $(left) s left"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && [ "$(left)" -gt 160 ]; then
  sed -e '/^if \[ \$SECONDS -lt 330 \]; then/,/^fi$/d' docs/perf/data/serving-s46/call3.sh > /tmp/call3-gp.sh
  bash /tmp/call3-gp.sh
  echo "== after call 3: $(left) s left"
fi
if [ "$(left)" -gt 150 ]; then bash docs/perf/data/serving-s46/call4.sh; fi
echo "== done: $(left) s left"
