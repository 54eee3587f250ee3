#!/usr/bin/env bash
# Prepared in session 41 (any sm_90a card; ≈ 120 s; carry [".devbin/probes"]: branch probes =
# main + next/probes.patch, packed by `bash bench/gpu/pack_bins.sh .devbin/probes
# headroom-cuda:fp8_ops headroom-cuda:fp8_grouped` from its own checkout and CARGO_TARGET_DIR).
# Two measurements, no engine change (merge the branch with its results either way):
# 1. ltalgos: the dense FP8 GEMMs (cuBLASLt's block-scaled matmul, the heuristic's first
#    algorithm) are 17 % of a 32k FP8 prefill's kernel time and 21.5 % of an 8k one's
#    (serving.md session 41, call 3). Every candidate the heuristic gives (up to 16), timed on
#    the 35B's dense shapes at 8,192 and 32,768 rows, each output compared with the first's.
#    Prediction: the first within 3 % of the fastest on the large shapes; a candidate ≥ 5 %
#    faster on in_proj / out_proj with outputs within bf16 rounding would make a measured
#    (qualified) algorithm choice worth building.
# 2. tails: the routed ws GEMMs at 8,192 tokens with every expert at exactly 256 rows (no tile
#    tails) against near-uniform random logits, and at W1's 8,469 (cuda-fp8.md session 41's
#    arithmetic: the tails ≈ 15-20 % of the routed GEMMs at this size). Prediction: balanced
#    0.80-0.85 of random at 8,192.
source bench/gpu/call_prelude.sh probes
timeout 200 /tmp/probes/h/fp8_ops --ignored --nocapture --exact \
  lt_algos::timing_every_heuristic_candidate_on_the_dense_prefill_shapes > "$O/ltalgos.txt" 2>&1
echo "ltalgos rc $? (t=$SECONDS)"; grep -E "fp8_lt_algos|test result|panicked" "$O/ltalgos.txt"
timeout 120 /tmp/probes/h/fp8_grouped --ignored --nocapture --exact \
  timing::timing_the_ws_gemms_with_and_without_tile_tails > "$O/tails.txt" 2>&1
echo "tails rc $? (t=$SECONDS)"; grep -E "fp8_grouped_tails|test result|panicked" "$O/tails.txt"
