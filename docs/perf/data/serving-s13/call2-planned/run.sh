#!/usr/bin/env bash
# Session 13's planned GPU call (not run: the session's device time ended).
# Build on the build machine first, into .devbin/c2/bins.tar.xz (carry ".devbin/c2"):
#   gdn           the gdn test binary of branch gdnfused (it holds gdnlite too):
#                 cargo test --release -p headroom-cuda --test gdn --no-run
#   backend_ops   the backend_ops test binary of branch gatherv16
#   headroom-main main's release binary (or gatherv16's)
#   headroom-lite branch gdnlite-on's release binary (gdnlite merged with main, the lite
#                 pair as the default), or a branch with the winning form as the default
#   tar -cJf .devbin/c2/bins.tar.xz -C DIR gdn backend_ops headroom-main headroom-lite
# Then: W1_BEFORE=140 bash .devbin/c2/run.sh (copy this file there). A run returns at
# most 8 files: everything else is tarred into all.tgz at the end.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
mkdir -p /tmp/c2 && tar -xJf .devbin/c2/bins.tar.xz -C /tmp/c2 && ls /tmp/c2
R=$O/log.txt
{
echo "=== gather (gatherv16) t=$(el)"
/tmp/c2/backend_ops --ignored --test-threads 1 gather 2>&1 | grep -E "^test |test result|panicked"
echo "=== gdn tests (wu, lite, fused, fusedwgmma) t=$(el)"
timeout 240 /tmp/c2/gdn --ignored --test-threads 1 --skip bench_ 2>&1 | grep -E "^test |test result|panicked|rel|err" | head -120
echo "gdn tests rc ${PIPESTATUS[0]}"
echo "=== gdn memcheck (lite, fused, fusedwgmma) t=$(el)"
GDN_CHECK_FORMS=lite,fused,fusedwgmma timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 /tmp/c2/gdn --ignored \
    --test-threads 1 varlen_batch_with_slots_gqa_and_initial_state decode_batch_runs_every_sequence_in_one_call 2>&1 | tail -4
echo "=== gdn bench t=$(el)"
GDN_BENCH_T=2048,8192,32768 GDN_BENCH_VARIANTS=prep-alone,prep-alone-lite,scan-Narrow,scan-Narrow-lite,scan-Wide-8seq,scan-Wide-8seq-lite,scan-Full-fused,scan-Full-8seq-fused,scan-Full-fusedwgmma,scan-Full-8seq-fusedwgmma \
    timeout 120 /tmp/c2/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 | grep -E "gdn_bench|gdn_split|panicked"
} > "$R" 2>&1
cat "$R"
echo "t=$(el)"
if grep -q "gdn tests rc 0" "$R"; then
  for b in main lite; do
    echo "=== ttft $b t=$(el)"
    timeout 70 /tmp/c2/headroom-$b bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
        --iterations 3 --json "$O/ttft-$b.json" > "$O/ttft-$b.txt" 2>&1; echo "rc $?"; grep -iE "ttft|median|8192|32768" "$O/ttft-$b.txt" | head -12
  done
  if [ $(el) -lt ${W1_BEFORE:-150} ]; then
    echo "=== W1 lite t=$(el)"
    /tmp/c2/headroom-lite serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8201 > "$O/serve-w1.log" 2>&1 &
    SP=$!
    for i in $(seq 1 240); do grep -q "listening on" "$O/serve-w1.log" && break; sleep 0.5; done
    timeout 60 /tmp/c2/headroom-lite bench serve --url http://127.0.0.1:8201 --concurrency 512 --requests 1000 \
        --prompt-len 1024 --max-tokens 128 --json "$O/w1-lite.json" > "$O/w1-lite.txt" 2>&1; echo "w1 rc $?"
    grep -E "requests at|output tok/s" "$O/w1-lite.txt"
    kill -TERM $SP; wait $SP
  fi
fi
echo "done t=$(el)"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz -delete
