#!/usr/bin/env bash
# Session 46, call 5b: call5.sh trimmed to the device time left (≈ 150 s of work; carry
# [".devbin/ga", ".devbin/gb"]): the fingerprints, gb's f64 tests and memcheck, one bench round
# a arm at 32,768 and 8,192 rows; no TTFT. Prediction: call5.sh's.
source bench/gpu/call_prelude.sh ga gb
for v in ga gb; do
  timeout 60 /tmp/$v/h/gdn --ignored --exact fixed_inputs_give_the_same_bits_run_after_run --nocapture 2>&1 \
    | grep -E "gdn_fingerprint|test result|panicked" | sed "s/^/$v: /"
done | tee "$O/fingerprints.txt"
for v in ga gb ga gb; do
  GDN_BENCH_T=32768,8192 GDN_BENCH_VARIANTS=prep-alone,scan-Narrow,scan-Wide,scan-Narrow-noload GDN_BENCH_REPS=5 GDN_BENCH_CROSS= \
    timeout 60 /tmp/$v/h/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 \
    | grep -E "gdn_bench|gdn_split|panicked" | sed "s/^/$v: /"
done | tee "$O/bench.txt" | grep -E "gdn_split|panicked" | cut -c1-110
echo "(t=$SECONDS)"
timeout 100 /tmp/gb/h/gdn --ignored --test-threads 1 --skip bench_ > "$O/tests-gb.txt" 2>&1
echo "tests gb rc $? (t=$SECONDS)"; grep -E "^test |test result" "$O/tests-gb.txt" | tail -12
if [ $SECONDS -lt 120 ]; then
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/gb/h/gdn --ignored --test-threads 1 \
    varlen_batch_with_slots_gqa_and_initial_state chunk_split_300_as_64_37_199_carries_the_state > "$O/memcheck-gb.txt" 2>&1
  echo "memcheck gb rc $? (t=$SECONDS)"; tail -2 "$O/memcheck-gb.txt"
fi
pack_outputs call5b
echo "done (t=$SECONDS)"
