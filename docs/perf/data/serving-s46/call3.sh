#!/usr/bin/env bash
# Session 46, call 3 (carry [".devbin/gdn", ".devbin/gp", ".devbin/gp2", ".devbin/head"]): the
# persistent GDN decode grids on the card they were written for. Call 1 ran them on an H100,
# where main's kernel already moves the state at the card's copy rate (2.87 TB/s against the
# probe's 2.88–2.92) and both arms lost (gp +22 %, gp2 +10 % at 512 sequences). On an H200
# main moved it at 3.73 TB/s of a ≈ 4.3 copy (session 44). Prediction (before the run, revised
# after call 1): on an H200 gp2 within −8 % … +5 % of main at 512, gp slower; W1 FP8 only if
# an arm is ≥ 3 % faster at 256 and 512. Then call 2's ncu of the 32k kernels if time is left.
source bench/gpu/call_prelude.sh gdn gp gp2 head
for v in gdn gp gp2 gdn gp gp2; do
  (cd "$O" && timeout 90 /tmp/$v/h/gdn_decode_timing --ignored --nocapture >> "$O/timing-$v.txt" 2>&1)
  echo "timing $v rc $? (t=$SECONDS)"
  grep -E "^gdn_decode_timing:" "$O/timing-$v.txt" | tail -8 | grep -E "n=(1|16|64|256|512):" | cut -c1-120
done
med() { grep -E "^gdn_decode_timing: n=$2:" "$O/timing-$1.txt" | sed -E 's/.*stream ([0-9.]+) us.*/\1/' | awk '{s+=$1;n++} END {print s/n}'; }
best=""; for v in gp gp2; do
  ok=$(awk -v a="$(med gdn 512)" -v b="$(med $v 512)" -v c="$(med gdn 256)" -v d="$(med $v 256)" \
    'BEGIN {print (b < 0.97 * a && d < 0.97 * c) ? 1 : 0}')
  echo "$v: 512 $(med $v 512) vs main $(med gdn 512); 256 $(med $v 256) vs $(med gdn 256); wins $ok"
  [ "$ok" = 1 ] && best=$v
done
if [ -n "$best" ]; then
  (cd "$O" && timeout 100 /tmp/$best/h/fused_decode --ignored --test-threads 1 gdn_core > "$O/fused_decode-$best.txt" 2>&1)
  echo "fused_decode $best rc $?"; grep -E "test result" "$O/fused_decode-$best.txt"
  source docs/perf/data/serving-s31/w1_arm.sh
  w1 gdn /tmp/gdn/h/headroom qwen3.6-35b-a3b-fp8 8481
  w1 "$best" "/tmp/$best/h/headroom" qwen3.6-35b-a3b-fp8 8482
fi
if [ $SECONDS -lt 330 ]; then
  sed -e '/^source bench\/gpu\/call_prelude.sh/d' -e '/^pack_outputs/d' -e '/^echo "done/d' \
    docs/perf/data/serving-s46/call2.sh > /tmp/call2-body.sh
  source /tmp/call2-body.sh
fi
pack_outputs call3
echo "done (t=$SECONDS)"
