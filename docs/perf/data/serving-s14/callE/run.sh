#!/usr/bin/env bash
# Session 14 call E (main b2e8183): the engine and model GPU checks on the
# landing (GDN widths, moe clean-up), and the widths' errors printed.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/c14e; mkdir -p $B && tar -xJf .devbin/c14e/bins.tar.xz -C $B
R=$O/log.txt
{
echo "=== gdn widths' errors t=$(el)"
timeout 60 $B/gdn --ignored --test-threads 1 --nocapture every_width_matches_the_others_on_35b_dims chunk_split_300 2>&1 \
    | grep -E "vs narrow|one call vs|test result|panicked" | head -40
echo "=== check_engine t=$(el)"
OUT=$O timeout 300 bash bench/gpu/check_engine.sh $B/cuda_engine $B/headroom > "$O/check_engine.txt" 2>&1; echo "check_engine rc $?"
grep -E "^test |test result|worst|FAILED|panicked|generate" "$O/check_engine.txt" | head -40
if [ $(el) -lt 330 ]; then
  echo "=== check_model t=$(el)"
  OUT=$O timeout 230 bash bench/gpu/check_model.sh $B/headroom > "$O/check_model_run.txt" 2>&1; echo "check_model rc $?"
  grep -E "FAIL|check_model:" "$O/check_model_run.txt" | head -20
fi
echo "done t=$(el)"
} > "$R" 2>&1
cat "$R"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz ! -name log.txt -delete
