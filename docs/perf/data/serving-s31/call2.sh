#!/usr/bin/env bash
# Session 31, call 2 (H100): the GDN prep with its Gram pieces dealt 3 at
# most a warp and each decay computed once for P and A (branch prepbal),
# against main's prep, one machine.
#   A = .devbin/s31/gdn-a (main's kernels + the fingerprint test),
#   B = .devbin/s31/gdn-b (the branch).
# 1. the fingerprints of fixed inputs (8 x 1,024 full-width, 1 x 2,048
#    narrow) on A and B: the change must keep every bit;
# 2. B's f64 tests (every width) and memcheck;
# 3. the bench rows A B A B: prep alone at 8,192 / 32,768, the whole rule
#    at 8 x 1,024 (full-width) and 1 x 32,768 (narrow);
# 4. ncu source counters of B's prep at 8,192 (where its samples go now).
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
D=.devbin/s31
for b in a b; do
  timeout 120 $D/gdn-$b --ignored --exact fixed_inputs_give_the_same_bits_run_after_run --nocapture 2>&1 \
    | grep -E "gdn_fingerprint|test result|panicked" | sed "s/^/$b: /"
done | tee "$O/fingerprints.txt"
timeout 240 $D/gdn-b --ignored --test-threads 1 --skip bench_ > "$O/tests-b.txt" 2>&1
echo "tests b rc $?"; grep -E "^test |test result" "$O/tests-b.txt" | tail -14
compute-sanitizer --tool memcheck --error-exitcode 9 $D/gdn-b --ignored --test-threads 1 \
  varlen_batch_with_slots_gqa_and_initial_state chunk_split_300_as_64_37_199_carries_the_state > "$O/memcheck-b.txt" 2>&1
echo "memcheck b rc $?"; tail -3 "$O/memcheck-b.txt"
for r in 1 2; do for b in a b; do
  GDN_BENCH_T=8192,32768 GDN_BENCH_VARIANTS=prep-alone,scan-Narrow,scan-Full-8seq GDN_BENCH_CROSS= \
    timeout 120 $D/gdn-$b --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 \
    | grep -E "gdn_bench|panicked" | sed "s/^/$b$r: /"
done; done | tee "$O/bench.txt"
GDN_BENCH_T=8192 GDN_BENCH_REPS=3 GDN_BENCH_VARIANTS=prep-alone GDN_BENCH_CROSS= timeout 200 ncu --clock-control none \
  -k regex:gdn_chunk_prep --launch-skip 2 --launch-count 1 --section SpeedOfLight --section Occupancy \
  --section WarpStateStats --section SourceCounters --section LaunchStats -o "$O/prepb" -f \
  $D/gdn-b --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture > "$O/prepb-run.txt" 2>&1
ncu --import "$O/prepb.ncu-rep" --page details > "$O/prepb-details.txt" 2>&1
ncu --import "$O/prepb.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$O/prepb-sass.csv.gz"
grep -E "Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Eligible Warps" "$O/prepb-details.txt"
rm -f "$O"/*.ncu-rep
