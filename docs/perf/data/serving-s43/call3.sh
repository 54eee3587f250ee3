#!/usr/bin/env bash
# Session 43, call 3 (any sm_90a card; ≈ 330 s; carry [".devbin/clock", ".devbin/fold"]):
# branch combnorm (038e2ad: the MoE combine with the next layer's input norm folded in,
# `moe_combine_shared_norm(_fp8)`; packed by `bash bench/gpu/pack_bins.sh .devbin/fold
# headroom-cuda:fp8_backend` from the branch) against main 141439e (.devbin/clock).
# 1. Correctness: fp8_backend's norm_fold (the folded call bit for bit the calls: normed
#    rows, residual, codes; bf16 and FP8 experts; decode, prefill and two-pass rows; a NaN
#    row) and norm_codes (the norm's row writer moved to norm_row_out.cuh), and the FP8 MoE
#    block against f64.
# 2. Which kernels run: one FP8 8k prefill's combine and norm launches under ncu, both arms.
# 3. FP8 TTFT 8k / 32k alternating head, fold, head, fold (clock and energy lines).
# Prediction (written before the run): tests pass; fold runs moe_combine_shared_norm_fp8
# 39 times a prefill (the last layer's block keeps moe_combine_shared) at ≈ combine + norm
# − 15–25 µs a layer at 8k; FP8 32k TTFT −0.5 to −1.0 % (−2.5 to −5 ms), 8k −0.5 to −1 %,
# energy a run down by about as much.
source bench/gpu/call_prelude.sh clock fold
F=/tmp/fold/h
(cd "$O" && timeout 150 $F/fp8_backend --ignored --test-threads 1 norm_fold norm_codes \
  the_moe_block_on_fp8_experts > "$O/fp8_backend.txt" 2>&1; echo "fp8_backend rc $? (t=$SECONDS)")
grep -E "^test |test result" "$O/fp8_backend.txt" | cut -c1-160
for v in clock fold; do
  HEADROOM_PROFILE_STEP=1 timeout 90 ncu --profile-from-start off --kernel-name regex:'moe_combine|add_rms_norm_quad' \
    --metrics gpu__time_duration.sum --csv --cache-control none --clock-control none \
    /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 8192 --iterations 1 \
    --warmup 1 > "$O/ncu-$v.csv" 2> "$O/ncu-$v.err"
  echo "ncu $v rc $? (t=$SECONDS)"
  python3 - "$O/ncu-$v.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: print("  no rows"); sys.exit()
h = rows[0]; k = h.index("Kernel Name"); v = h.index("Metric Value")
agg = collections.defaultdict(list)
for r in rows[1:]:
    try: agg[r[k].split("(")[0]].append(float(r[v].replace(",", "")))
    except ValueError: pass
for n, t in sorted(agg.items()):
    print(f"  {n}: {len(t)} launches, {sum(t)/1e3:.1f} us total, {sum(t)/len(t)/1e3:.1f} us each")
PY
done
gzip -f "$O"/ncu-*.csv 2>/dev/null
for v in clock fold clock fold; do
  timeout 80 /tmp/$v/h/headroom bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 8192,32768 \
    --iterations 3 --warmup 1 >> "$O/ttft-$v.txt" 2>&1
  echo "ttft $v rc $? (t=$SECONDS): $(grep -E 'tokens  TTFT' "$O/ttft-$v.txt" | tail -2 | cut -c1-50 | tr '\n' ' ')"
  grep -E "clock over" "$O/ttft-$v.txt" | tail -1 | cut -c1-200
done
