#!/usr/bin/env bash
# Session 14 call D (branch gdnland 80ba708 = the GDN landing + moeclean): the
# moe / fp8 tests of moeclean, W1 and TTFT A/B against the before binary
# (s14ab with HEADROOM_GDN_FORM=wu = main + the 16-byte gather), the new
# width rule's crossover picks, ncu of the full and wide scans at 8 x 1,024.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/out}; mkdir -p "$O"
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source bench/gpu/env.sh > "$O/env.txt" 2>&1
export HEADROOM_KERNEL_CACHE=/tmp/kcache
B=/tmp/c14d; mkdir -p $B && tar -xJf .devbin/c14d/bins.tar.xz -C $B
R=$O/log.txt
{
echo "=== check_moe t=$(el)"
OUT=$O CHECK_S=150 BENCH_S=60 bash .devbin/c14d/check_moe.sh $B/moe > "$O/check_moe.txt" 2>&1; echo "check_moe rc $?"
grep -E "^test |test result|FAILED|ERROR SUMMARY|status|panicked" "$O/check_moe.txt" | head -40
grep -E "ms|TFLOP" "$O/moe_bench.log" "$O/moe_op_bench.log" 2>/dev/null | head -20
echo "=== ws sanitizer t=$(el)"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/moe --ignored --exact ws::ws_sanitizer_case 2>&1 | tail -3
echo "=== fp8 t=$(el)"
timeout 120 $B/fp8_grouped --ignored --test-threads 1 2>&1 | grep -E "^test |test result|panicked"
timeout 90 $B/fp8_backend --ignored --test-threads 1 the_moe_block_on_fp8_experts 2>&1 | grep -E "^test |test result|panicked"
timeout 90 $B/backend_ops --ignored --test-threads 1 experts:: 2>&1 | grep -E "^test |test result|panicked"
echo "=== ttft A/B t=$(el)"
for b in before after; do
  bin=$B/headroom; [ $b = before ] && bin=$B/headroom-before
  HEADROOM_GDN_FORM=wu timeout 80 $bin bench ttft --backend cuda --synthetic qwen3.6-35b-a3b --lengths 8192,32768 \
    --iterations 3 --json "$O/ttft-$b.json" > "$O/ttft-$b.txt" 2>&1; echo "$b rc $?"; grep -E "TTFT" "$O/ttft-$b.txt"
done
port=8500
for b in before after before after; do
  port=$((port+1)); bin=$B/headroom; [ $b = before ] && bin=$B/headroom-before
  echo "=== W1 $b t=$(el)"
  HEADROOM_GDN_FORM=wu $bin serve --backend cuda --synthetic qwen3.6-35b-a3b --port $port > "$O/serve-$port.log" 2>&1 &
  SP=$!
  for i in $(seq 1 240); do grep -q "listening on" "$O/serve-$port.log" && break; sleep 0.5; done
  timeout 90 $bin bench serve --url http://127.0.0.1:$port --concurrency 512 --requests 1000 \
      --prompt-len 1024 --max-tokens 128 --json "$O/w1-$b-$port.json" > "$O/w1-$b-$port.txt" 2>&1; echo "w1 rc $?"
  grep -E "output tok/s" "$O/w1-$b-$port.txt"
  kill -TERM $SP; wait $SP
done
echo "=== crossover picks t=$(el)"
GDN_BENCH_T=2048 GDN_BENCH_VARIANTS=none GDN_BENCH_CROSS=1x1024,2x1024,3x1024,4x1024,2x4096,3x4096 timeout 60 $B/gdn --ignored --exact \
    bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture 2>&1 | grep -E "gdn_cross|panicked"
if [ $(el) -lt 420 ]; then
  echo "=== ncu full/wide scans at 8 x 1,024 t=$(el)"
  GDN_BENCH_T=8192 GDN_BENCH_REPS=1 GDN_BENCH_CROSS= GDN_BENCH_VARIANTS=scan-Wide-8seq,scan-Full-8seq timeout 120 ncu --clock-control none \
    --kernel-name regex:gdn_chunk_scan --launch-count 4 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --section SchedulerStats $B/gdn --ignored --exact bench::bench_qwen36_35b_prefill_ms_per_layer --nocapture > "$O/ncu-scan.txt" 2>&1
  echo "ncu rc $?"; grep -E "^  gdn_|Duration|Throughput|Warp Cycles Per Issued|Registers Per|Issue Slots Busy|Executed Ipc A|No Eligible" "$O/ncu-scan.txt" | head -60
fi
echo "done t=$(el)"
} > "$R" 2>&1
cat "$R"
cd "$O" && tar czf all.tgz --exclude=all.tgz . 2>/dev/null; find . -type f ! -name all.tgz ! -name log.txt -delete
