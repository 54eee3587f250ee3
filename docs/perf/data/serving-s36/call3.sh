#!/usr/bin/env bash
# Session 36, call 3 (any sm_90a card; carry [".devbin/next"]): is the FP8
# ws grouped GEMM L2-bound? Call 2's step (W1 FP8, step 36: 8,192 prefill
# rows + 277 decode rows) puts gate+up at 642 and down at 508 TFLOP/s of
# useful rows, the dense cuBLASLt FP8 GEMMs (128x128 tiles, a 2x1 cluster)
# at 1,160-1,230. Prediction: the ws kernels' L2 throughput near its peak
# (128 FLOP a byte of A + B at 128x128 tiles, ≈ 6 TB/s), their tensor pipe
# under half busy; cuBLASLt's tensor pipe busier at a similar L2 rate.
# The first 10 matching launches of the step: layer 0's six nvjet GEMMs,
# its gate+up and down, layer 1's first two nvjet GEMMs. Then the same on
# branch fp8wide (.devbin/wide: 128 x 256 units, call4.sh) where carried.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for v in next wide; do [ -d .devbin/$v ] && mkdir -p /tmp/$v && tar -xJf .devbin/$v/bins.tar.xz -C /tmp/$v; done
B=/tmp/next/h/headroom
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
arm() {  # arm NAME EXTRA-NCU-ARGS...
  local n=$1; shift
  HEADROOM_PROFILE_STEP=35 timeout 240 ncu --profile-from-start off --clock-control none --cache-control none \
    -k regex:'ws_fp8|nvjet_sm90_qqtst' --launch-count 10 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section Occupancy "$@" --csv --page details --log-file "$O/ncu-$n.csv" \
    --target-processes all \
    $B serve --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --port 8931 --warmup off > "$O/serve-$n.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-$n.log" && break; kill -0 $sp 2>/dev/null || break; sleep 0.5; done
  timeout 60 $B bench serve --url http://127.0.0.1:8931 --concurrency 512 --requests 512 --prompt-len 1024 \
    --max-tokens 128 --time-limit-s 20 > "$O/bench-$n.txt" 2>&1
  pkill -TERM -x headroom; wait $sp; echo "arm $n rc $? t=$SECONDS"
}
arm gmma --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second
M=--metrics\ sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second,dram__bytes_read.sum.per_second
if ! grep -q "ws_fp8" "$O/ncu-gmma.csv" 2>/dev/null; then tail -5 "$O/ncu-gmma.csv"; M=; arm plain; fi
if [ -x /tmp/wide/h/headroom ]; then B=/tmp/wide/h/headroom; arm wide $M; fi
for f in "$O"/ncu-*.csv; do
python3 - "$f" <<'PY'
import csv, io, sys
t = open(sys.argv[1]).read().splitlines()
i = next(k for k, l in enumerate(t) if l.startswith('"ID"'))
rows = list(csv.DictReader(io.StringIO("\n".join(t[i:]))))
want = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "L2 Cache Throughput", "DRAM Throughput",
        "L1/TEX Cache Throughput", "L2 Hit Rate", "Executed Ipc Active", "Issue Slots Busy", "Achieved Occupancy",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", "lts__t_bytes.sum.per_second",
        "dram__bytes_read.sum.per_second", "Mem Busy", "Max Bandwidth", "Mem Pipes Busy", "L2 Compression Ratio")
by = {}
for r in rows:
    k = (int(r["ID"]), r["Kernel Name"][:34])
    if r["Metric Name"] in want:
        by.setdefault(k, {})[r["Metric Name"]] = r["Metric Value"] + " " + r["Metric Unit"]
for k in sorted(by):
    print(k[0], k[1]); [print("   ", m, "=", v) for m, v in by[k].items()]
PY
done > "$O/summary.txt" 2>&1
cat "$O/summary.txt" | head -150
gzip -f "$O"/ncu-*.csv "$O"/serve-*.log
