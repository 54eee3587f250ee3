#!/usr/bin/env bash
# Session 16, call 5 (scratch binaries of branch probe16 in .devbin/p16, main b6c092c in .devbin/s16c):
# (1) are the grouped-GEMM families bitwise equal per row on the 35B shape (MmaSync against Stream,
#     Wgmma, Ws at 1 … 2,048 tokens)? (2) the CUDA engine's 255-others spread with one grouped
#     family forced for every row count (PROBE_MOE, scratch) against the default (decode kernels
#     at <= 8 rows); (3) ncu SpeedOfLight of one W1 mixed step's kernels (step 45, --warmup off),
#     cuBLAS and the Ws GEMMs left out (known: at peak / L2-bound), summed by sol_sum.py.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
P=/tmp/p16; M=/tmp/s16c; mkdir -p $P $M
tar -xJf .devbin/p16/bins.tar.xz -C $P; tar -xJf .devbin/s16c/bins.tar.xz -C $M
export HEADROOM_KERNEL_CACHE=/tmp/kcache
source bench/gpu/env.sh
D=docs/perf/data/serving-s16/call5
{
echo "=== (1) families bitwise"
timeout 120 $P/moe --ignored --nocapture --test-threads 1 ws::probe_families_bitwise 2>&1 | grep -E "probe|test result|panicked"
echo "=== (2) cuda_engine, default and one family forced"
for f in default mmasync stream wgmma ws; do
  if [ $f = default ]; then unset PROBE_MOE; else export PROBE_MOE=$f; fi
  timeout 120 $P/cuda_engine --ignored --nocapture --test-threads 1 > "$O/engine-$f.txt" 2>&1; echo "$f rc $?"
  grep -E "worst|panicked at|request .* step" "$O/engine-$f.txt" | sed "s/^/  /" | head -8
done
unset PROBE_MOE
echo "=== (3) ncu SpeedOfLight of W1's mixed step 45"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
export HEADROOM_PROFILE_STEP=45
timeout 300 $NCU --profile-from-start off --section SpeedOfLight --csv --log-file "$O/ncu-mixed.csv" \
  --launch-count 400 --target-processes all \
  $M/headroom serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8901 --warmup off > "$O/serve-ncu.log" 2>&1 &
SP=$!
for _ in $(seq 1 600); do grep -q "listening on" "$O/serve-ncu.log" && break; sleep 0.5; done
timeout 200 $M/headroom bench serve --url http://127.0.0.1:8901 --concurrency 512 --requests 512 --prompt-len 1024 \
  --max-tokens 128 > "$O/bench-ncu.txt" 2>&1; echo "bench rc $?"
pkill -TERM -x headroom; wait $SP
unset HEADROOM_PROFILE_STEP
python3 $D/sol_sum.py "$O/ncu-mixed.csv" > "$O/sol-mixed.txt" 2>&1; head -45 "$O/sol-mixed.txt"
} > "$O/log.txt" 2>&1
cat "$O/log.txt"
gzip -k "$O/ncu-mixed.csv" 2>/dev/null; rm -f "$O/ncu-mixed.csv"
cd "$O" && tar -cJf raw.tar.xz --exclude raw.tar.xz --exclude log.txt . 2>/dev/null; ls "$O"
