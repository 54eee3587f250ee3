#!/usr/bin/env bash
# Session 41, call 2 (any sm_90a card; ≈ 420 s; carry [".devbin/head", ".devbin/pingpong"]:
# head = main 8362bbf (rankpar merged), pingpong = main + serving-s40/next/pingpong.patch).
# 1. pingpong's attention alone: call 1's 32k TTFT runs moved the attention's share by −0.4 %
#    (inside the runs' drift). mixed_attention_timing (W1's mixed step by item order, prompts of
#    8 x 1,024 / 2 x 4,096 / 1 x 8,192, and the output fingerprint of a random batch: the same
#    bits), head / pingpong / head / pingpong. Prediction (session 40): −2 to −6 % on the long
#    prompts (pairs kernel), the mixed step unchanged, the same fingerprint.
# 2. Where the FP8 ws grouped GEMMs' warps stall (docs/perf/cuda-fp8.md session 40: not the L2
#    after all): ncu source counters for one launch each of moe_gemm_gate_up_ws_fp8 and
#    moe_gemm_down_ws_fp8 in an 8,192-token FP8 prefill; stall samples by SASS line and
#    grouped by opcode (wgmma issue, wgmma wait, mbarrier waits, promotion FFMA, epilogue).
# 3. On an H200: the bars on head (rankpar + pairs2): FP8 32k TTFT, bf16 and FP8 decode after
#    2k and 32k, then W1 FP8 while time is left.
source bench/gpu/call_prelude.sh head pingpong
for v in head pingpong head pingpong; do
  timeout 90 /tmp/$v/h/mixed_attention_timing --ignored --nocapture --test-threads 1 >> "$O/attn-$v.txt" 2>&1
  echo "attn $v rc $? (t=$SECONDS)"
  grep -E "prompt_attn|fingerprint|^mixed|longest|alone" "$O/attn-$v.txt" | tail -8 | cut -c1-140
done
B=/tmp/head/h/headroom
for k in moe_gemm_gate_up_ws_fp8 moe_gemm_down_ws_fp8; do
  timeout 120 ncu -k regex:"^$k\$" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --cache-control none --clock-control none \
    -o "$O/src-$k" $B bench ttft --backend cuda --synthetic qwen3.6-35b-a3b-fp8 --lengths 8192 \
    --iterations 1 --warmup 0 > "$O/src-$k.log" 2>&1
  echo "ncu $k rc $? (t=$SECONDS)"
  ncu -i "$O/src-$k.ncu-rep" --page details --csv > "$O/details-$k.csv" 2>/dev/null
  ncu -i "$O/src-$k.ncu-rep" --page source --print-source sass --csv > "$O/src-$k.csv" 2> "$O/src-$k.err"
  python3 - "$O/src-$k.csv" <<'PY'
import csv, sys, re, collections
rows = list(csv.reader(open(sys.argv[1])))
hi = next((i for i, r in enumerate(rows) if "Source" in r and "Address" in r), None)
if hi is None: sys.exit(print("no header:", rows[:3]))
h = rows[hi]; body = [r for r in rows[hi + 1:] if len(r) == len(h)]
num = lambda s: float(s.replace(",", "") or 0) if s not in ("-", "") else 0.0
S = h.index("Warp Stall Sampling (All Samples)"); X = h.index("Instructions Executed"); src = h.index("Source")
reasons = [i for i, c in enumerate(h) if c.startswith("stall_") and "Not Issued" not in c]
tot = sum(num(r[S]) for r in body) or 1
print(f"total stall samples {tot:.0f}, warp instructions {sum(num(r[X]) for r in body):.0f}, {len(body)} SASS lines")
def top(r):
    rs = sorted(((num(r[i]), h[i][6:]) for i in reasons), reverse=True)[:3]
    return " ".join(f"{n}:{100 * v / max(num(r[S]), 1):.0f}%" for v, n in rs if v > 0)
ops = collections.Counter(); opx = collections.Counter()
for r in body:
    m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_]+(\.[A-Z0-9_]+)?)", r[src]); op = m.group(2) if m else "?"
    ops[op] += num(r[S]); opx[op] += num(r[X])
print("by opcode (stall share, instructions):")
for op, v in ops.most_common(16): print(f"  {100 * v / tot:5.1f}%  {opx[op]:>10.0f}  {op}")
print("top lines:")
for r in sorted(body, key=lambda r: -num(r[S]))[:30]:
    print(f"{100 * num(r[S]) / tot:5.1f}%  exec {r[X]:>8}  {r[src].strip()[:70]:70}  {top(r)}")
PY
done
gzip -f "$O"/src-*.csv "$O"/details-*.csv 2>/dev/null; rm -f "$O"/*.ncu-rep
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for m in qwen3.6-35b-a3b-fp8 qwen3.6-35b-a3b; do
    timeout 100 $B bench ttft --backend cuda --synthetic $m --lengths 2048,32768 --iterations 3 --warmup 1 \
      --decode 64 > "$O/bars-$m.txt" 2>&1
    echo "bars $m rc $? (t=$SECONDS)"; grep -E "tokens  TTFT|decode" "$O/bars-$m.txt" | cut -c1-150
  done
  if [ $SECONDS -lt 420 ]; then
    source docs/perf/data/serving-s31/w1_arm.sh
    w1 fp8-head $B qwen3.6-35b-a3b-fp8 8971
  fi
fi
# At most 8 files come back: everything in one archive.
cd "$O" && tar -czf call2.tgz --exclude call2.tgz * && find . -type f ! -name call2.tgz -delete
