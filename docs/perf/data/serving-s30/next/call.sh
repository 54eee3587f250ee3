#!/usr/bin/env bash
# Prepared in session 30 for the next session with a GPU. Two modes, each
# under 600 s:
#   h200  main on the H200 (the card every open bar is set on): the GPU suite
#         (bench/gpu/check_all.sh, 330 s) with the activations measured at
#         start-up, then W1 (1,000 x 1,024 / 128, c = 512) on a fresh server,
#         default flags. Prediction: the start-up line counts ~79 kB a row
#         (the H100's 74,760 measured + a sixteenth) and plans more state
#         slots than session 26's 561 (the reserved step transient falls from
#         ~9.6 to ~5.4 GB); W1 5,599 +-1 % (W1 never ran short of slots).
#   h100  main on an H100: W1 on the bf16 35B (never run on an H100 with
#         default flags; 56 running: prediction 1,850-1,950 output tok/s, the
#         c = 256 figure of call 6 with twice the requests), then the GPU
#         suite's binaries call 7 did not run (the kernels', untouched by
#         session 30 but not yet run on main). Call 8 ran the FP8 preset's W1.
# Build on the build machine:
#   bash bench/gpu/pack_tests.sh .devbin/all && bash bench/gpu/pack_bins.sh .devbin/next
# carry [".devbin/all", ".devbin/next"].
set -u
case "${1:-}" in h200|h100) ;; *) echo "usage: $0 h200|h100" >&2; exit 1 ;; esac
O=${OUT:-/tmp/out}; mkdir -p "$O"
if [ "$1" = h200 ]; then exec bash docs/perf/data/serving-s29/h200.sh; fi
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
T=/tmp/next; B=$T/h/headroom; mkdir -p $T; tar -xJf .devbin/next/bins.tar.xz -C $T
SECONDS=0
$B serve --backend cuda --synthetic qwen3.6-35b-a3b --port 8921 > "$O/serve-w1.log" 2>&1 &
sp=$!
for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-w1.log" && break; sleep 0.5; done
grep -E "^serve on cuda" "$O/serve-w1.log" | cut -c1-900
timeout 150 $B bench serve --url http://127.0.0.1:8921 --json "$O/w1-bf16.json" \
  --concurrency 512 --requests 1000 --prompt-len 1024 --max-tokens 128 > "$O/w1-bf16.txt" 2>&1
grep -E "output tok/s|^ttft|^itl|^server" "$O/w1-bf16.txt" | head -6
kill -TERM $sp; wait $sp; echo "server exit $? (t=$SECONDS)"
ONLY="attention_split backend_ops decode_moe fp8_backend fp8_grouped fp8_ops fused_decode gdn gemv gpu graphs host_path linear_host moe paged_attention state_copy" \
  bash bench/gpu/check_all.sh .devbin/all $((560 - SECONDS)) 2>&1 | tail -30 | tee "$O/check-log.txt"
