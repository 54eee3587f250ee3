#!/usr/bin/env bash
# Session 44, call 4 (≈ 300 s; carry [".devbin/gdn", ".devbin/gp", ".devbin/gp2"]):
#   gdn = main (kernels of 9ae2df4), packed by `bash bench/gpu/pack_bins.sh .devbin/gdn
#         headroom-cuda:gdn_decode_timing`;
#   gp  = branch gdnpersist (next/gdnpersist.patch on 9ae2df4): the fused GDN decode
#         step on a persistent grid of ONE CTA an SM, the next item's state in
#         registers (128 a thread) while the current one is computed;
#   gp2 = branch gdnpersist2 (next/gdnpersist2.patch on 9ae2df4): the persistent
#         grid at TWO CTAs an SM, the next item's state copied into 64 KiB of
#         dynamic shared memory (cp.async) while the current one is computed;
#   both take the persistent entry above two CTAs an SM's worth of (value head,
#   sequence) items (from 9 sequences at 32 value heads on 132 SMs), main's one
#   item a CTA below; each packed by `bash bench/gpu/pack_bins.sh .devbin/ARM
#   headroom-cuda:gdn_decode_timing headroom-cuda:fused_decode` on its branch.
# 1. The arms' GPU tests of the fused GDN core against the CPU (fused_decode
#    gdn_core_*: GQA 1/2/3, the 35B shape, 1-3, 17 and 256 sequences over several
#    steps, NaN).
# 2. gdn_decode_timing gdn, gp, gp2, gdn, gp, gp2 (1-512 sequences).
# 3. W1 FP8 on main, then on the persistent arm faster at 512 sequences.
# Prediction (written before the run): the tests pass; at 512 sequences main's
# 576 µs a launch → gp 500–540 (−5 to −13 %), gp2 490–530 (−8 to −15 %); at
# 1–8 sequences the same (main's entry); at 16 and 64 sequences (2–16 items a
# CTA) −10 to +10 %; W1 FP8 +0.5 to +2 % with the faster arm.
source bench/gpu/call_prelude.sh gdn gp gp2
for v in gp gp2; do
  (cd "$O" && timeout 120 /tmp/$v/h/fused_decode --ignored --test-threads 1 gdn_core > "$O/fused_decode-$v.txt" 2>&1; \
    echo "fused_decode $v rc $? (t=$SECONDS)")
  grep -E "^test |test result" "$O/fused_decode-$v.txt" | cut -c1-150
done
for v in gdn gp gp2 gdn gp gp2; do
  (cd "$O" && timeout 90 /tmp/$v/h/gdn_decode_timing --ignored --nocapture >> "$O/timing-$v.txt" 2>&1)
  echo "timing $v rc $? (t=$SECONDS)"
  grep -E "^gdn_decode_timing:" "$O/timing-$v.txt" | tail -8 | grep -E "n=(1|8|16|64|256|512):" | cut -c1-140
done
# The persistent arm with the lower mean stream time at 512 sequences.
best=$(for v in gp gp2; do
  grep -E "^gdn_decode_timing: n=512:" "$O/timing-$v.txt" | sed -E 's/.*stream ([0-9.]+) us.*/\1/' |
    awk -v v=$v '{s += $1; n++} END {if (n) print s / n, v}'
done | sort -n | head -1 | cut -d' ' -f2)
echo "faster persistent arm at 512: ${best:-none}"
source docs/perf/data/serving-s31/w1_arm.sh
[ $SECONDS -lt 330 ] && w1 gdn /tmp/gdn/h/headroom qwen3.6-35b-a3b-fp8 8481
[ -n "$best" ] && [ $SECONDS -lt 400 ] && w1 "$best" "/tmp/$best/h/headroom" qwen3.6-35b-a3b-fp8 8482
pack_outputs call4
echo "done (t=$SECONDS)"
