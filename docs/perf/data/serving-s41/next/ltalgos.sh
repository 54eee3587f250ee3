#!/usr/bin/env bash
# Prepared in session 41 (any sm_90a card; ≈ 90 s; carry [".devbin/ltalgos"]: branch ltalgos
# (or main + next/ltalgos.patch) packed by `bash bench/gpu/pack_bins.sh .devbin/ltalgos headroom-cuda:fp8_ops` from its own
# checkout and CARGO_TARGET_DIR).
# Why: the dense FP8 GEMMs (cuBLASLt's block-scaled matmul, the heuristic's first algorithm) are
# 17 % of a 32k FP8 prefill's kernel time and 21.5 % of an 8k one's (serving.md session 41,
# call 3). Does the heuristic's first choice win on this card? Every candidate it gives (up to
# 16) timed on the 35B's dense shapes at 8,192 and 32,768 rows, each output compared with the
# first's. Prediction: the first within 3 % of the fastest on the large shapes; if a candidate
# is ≥ 5 % faster on the in_proj / out_proj shapes with outputs within bf16 rounding, a measured
# (qualified) algorithm choice per shape is worth building.
source bench/gpu/call_prelude.sh ltalgos
timeout 200 /tmp/ltalgos/h/fp8_ops --ignored --nocapture --exact \
  lt_algos::timing_every_heuristic_candidate_on_the_dense_prefill_shapes > "$O/ltalgos.txt" 2>&1
echo "ltalgos rc $? (t=$SECONDS)"; grep -E "fp8_lt_algos|test result|panicked" "$O/ltalgos.txt"
