#!/usr/bin/env bash
# Session 46, call 5 (≈ 250 s; carry [".devbin/ga", ".devbin/gb"]): branch `gdnbulk` — the
# narrow and wide GDN scans' tiles by bulk copies (cp.async.bulk onto one mbarrier a stage, a
# row of a tile a thread) in place of the 16-byte cp.async loop, which session 46's ncu put at a
# third of the narrow scan's instructions and a quarter of its stall samples (call 3).
# ga = main 9d7780d (headroom + the gdn test), gb = gdnbulk on it. Pack: on main
# `bench/gpu/pack_bins.sh .devbin/ga headroom-cuda:gdn`; on the branch the same into .devbin/gb.
# Prediction (before the run): the same bits (fingerprints equal: the same bytes land in the
# same places); B's f64 tests pass at every width; memcheck clean; the narrow scan at 1 × 32,768
# −8 to −20 % a layer (session 41: ≈ 1.20 ms; the ceiling is its -noload row, in this call),
# the wide scan −5 to −15 % (the full-width scan's loads were 12 % at 32k, session 14), the prep unchanged;
# FP8 32k TTFT −3 to −7 ms.
source bench/gpu/call_prelude.sh ga gb
for v in ga gb; do
  timeout 120 /tmp/$v/h/gdn --ignored --exact fixed_inputs_give_the_same_bits_run_after_run --nocapture 2>&1 \
    | grep -E "gdn_fingerprint|test result|panicked" | sed "s/^/$v: /"
done | tee "$O/fingerprints.txt"
timeout 240 /tmp/gb/h/gdn --ignored --test-threads 1 --skip bench_ > "$O/tests-gb.txt" 2>&1
echo "tests gb rc $? (t=$SECONDS)"; grep -E "^test |test result" "$O/tests-gb.txt" | tail -12
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/gb/h/gdn --ignored --test-threads 1 \
  varlen_batch_with_slots_gqa_and_initial_state chunk_split_300_as_64_37_199_carries_the_state \
  nan_in_one_row_stays_in_its_sequence > "$O/memcheck-gb.txt" 2>&1
echo "memcheck gb rc $? (t=$SECONDS)"; tail -2 "$O/memcheck-gb.txt"
for r in 1 2; do for v in ga gb; do
  GDN_BENCH_T=8192,32768 GDN_BENCH_VARIANTS=prep-alone,scan-Narrow,scan-Wide,scan-Narrow-noload,scan-Wide-8seq \
    GDN_BENCH_CROSS= timeout 120 /tmp/$v/h/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer \
    --nocapture 2>&1 | grep -E "gdn_bench|gdn_split|panicked" | sed "s/^/$v$r: /"
done; done | tee "$O/bench.txt" | grep -E "gdn_split|panicked" | cut -c1-110
echo "(t=$SECONDS)"
for v in ga gb; do
  [ $SECONDS -lt 330 ] || break
  timeout 100 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 32768 \
    --iterations 3 --warmup 1 > "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS): $(grep -E '32768' "$O/ttft-$v.txt" | head -2 | tr -s ' ' | cut -c1-120)"
done
pack_outputs call5
echo "done (t=$SECONDS)"
