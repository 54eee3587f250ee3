#!/usr/bin/env bash
# Session 44, call 4 (≈ 250 s; carry [".devbin/gdn", ".devbin/gp"]):
#   gdn = main 005088c, packed by `bash bench/gpu/pack_bins.sh .devbin/gdn headroom-cuda:gdn_decode_timing`;
#   gp  = branch gdnpersist (next/gdnpersist.patch on main 795ddbf: the fused GDN
#         decode step on a persistent grid, one CTA an SM, the next item's state
#         in registers while the current one is computed, taken above two CTAs
#         an SM's worth of (value head, sequence) items, i.e. from 9 sequences on
#         132 SMs; below, main's one item a CTA), packed by `bash
#         bench/gpu/pack_bins.sh .devbin/gp headroom-cuda:gdn_decode_timing
#         headroom-cuda:fused_decode`.
# 1. gp's GPU tests of the fused GDN core against the CPU (fused_decode gdn_core_*:
#    GQA 1/2/3, the 35B shape, 1-3, 17 and 256 sequences over several steps, NaN).
# 2. gdn_decode_timing head, gp, head, gp (1-512 sequences).
# 3. W1 FP8 head then gp (fresh servers), with the time left.
# Prediction (written before the run): the tests pass; at 512 sequences the
# launch 576 → 500–540 µs (3.73 → 4.0–4.3 TB/s), at 256 likewise −5 to −13 %;
# at 1–8 sequences the same (main's entry); at 16 and 64 (2–16 items a CTA)
# anywhere from −10 to +10 % (few items a CTA hide little); W1 FP8 +0.5 to +2 %.
source bench/gpu/call_prelude.sh gdn gp
(cd "$O" && timeout 150 /tmp/gp/h/fused_decode --ignored --test-threads 1 gdn_core > "$O/fused_decode.txt" 2>&1; \
  echo "fused_decode rc $? (t=$SECONDS)")
grep -E "^test |test result" "$O/fused_decode.txt" | cut -c1-150
for v in gdn gp gdn gp; do
  (cd "$O" && timeout 90 /tmp/$v/h/gdn_decode_timing --ignored --nocapture >> "$O/timing-$v.txt" 2>&1)
  echo "timing $v rc $? (t=$SECONDS)"
  grep -E "^gdn_decode_timing:" "$O/timing-$v.txt" | tail -8 | grep -E "n=(1|8|64|256|512):" | cut -c1-140
done
source docs/perf/data/serving-s31/w1_arm.sh
[ $SECONDS -lt 330 ] && w1 gdn /tmp/gdn/h/headroom qwen3.6-35b-a3b-fp8 8481
[ $SECONDS -lt 400 ] && w1 gp /tmp/gp/h/headroom qwen3.6-35b-a3b-fp8 8482
pack_outputs call4
echo "done (t=$SECONDS)"
