#!/usr/bin/env bash
# Session 14 call A (branch s14ab = gdnfused + main + gather v16 + scratch
# HEADROOM_GDN_FORM): GDN tests of all four forms, gather test, memcheck,
# bench rows, then TTFT 8k/32k wu vs lite.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/c14; mkdir -p $B && tar -xJf .devbin/c14/bins.tar.xz -C $B
R=$O/log.txt
{
echo "=== gather t=$(el)"
$B/backend_ops --ignored --test-threads 1 gather 2>&1 | grep -E "^test |test result|panicked"
echo "=== gdn tests t=$(el)"
timeout 240 $B/gdn --ignored --test-threads 1 --skip bench_ > "$O/gdn-tests.txt" 2>&1
echo "gdn tests rc $?"
grep -E "^test |test result|panicked" "$O/gdn-tests.txt"
echo "=== gdn memcheck t=$(el)"
GDN_CHECK_FORMS=lite,fused,fusedwgmma timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $B/gdn --ignored \
    --test-threads 1 varlen_batch_with_slots_gqa_and_initial_state decode_batch_runs_every_sequence_in_one_call > "$O/memcheck.txt" 2>&1
echo "memcheck rc $?"; tail -4 "$O/memcheck.txt"
echo "=== gdn bench t=$(el)"
GDN_BENCH_T=2048,8192,32768 GDN_BENCH_VARIANTS=prep-alone,prep-alone-lite,scan-Narrow,scan-Narrow-lite,scan-Wide-8seq,scan-Wide-8seq-lite,scan-Full-fused,scan-Full-8seq-fused,scan-Full-fusedwgmma,scan-Full-8seq-fusedwgmma \
    timeout 150 $B/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture > "$O/bench.txt" 2>&1
echo "bench rc $?"; grep -E "gdn_bench|gdn_split|panicked" "$O/bench.txt"
for f in wu lite; do
  [ $(el) -lt ${TTFT_BEFORE:-420} ] || break
  echo "=== ttft $f t=$(el)"
  HEADROOM_GDN_FORM=$f timeout 80 $B/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
      --iterations 3 --json "$O/ttft-$f.json" > "$O/ttft-$f.txt" 2>&1; echo "rc $?"; tail -8 "$O/ttft-$f.txt"
done
echo "done t=$(el)"
} > "$R" 2>&1
cat "$R"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz ! -name log.txt -delete
