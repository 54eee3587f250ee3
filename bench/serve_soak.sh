#!/usr/bin/env bash
# Soak run of `headroom serve` on the CPU (loopback only, bounded): start the server with
# tiny-d256, run `headroom bench serve` (default 1,000 requests at concurrency 64), read the
# server's RSS before, after and once more after a second pass, check /metrics (nothing running,
# no KV blocks held), then SIGTERM and check exit 0. Writes OUT_DIR/{soak.json,soak2.json,summary.txt}.
set -euo pipefail
BIN=${BIN:-target/release/headroom}
OUT_DIR=${1:-/tmp/headroom-soak}
REQUESTS=${REQUESTS:-1000}
CONCURRENCY=${CONCURRENCY:-64}
mkdir -p "$OUT_DIR"
"$BIN" serve --synthetic tiny-d256 --port 0 --max-context 1024 --max-running 64 > "$OUT_DIR/server.out" 2> "$OUT_DIR/server.err" &
PID=$!
trap 'kill -TERM $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do grep -q "listening on" "$OUT_DIR/server.out" 2>/dev/null && break; sleep 0.1; done
URL=$(awk '/listening on/ {print $3; exit}' "$OUT_DIR/server.out")
rss() { awk '/VmRSS/ {print $2}' /proc/$PID/status; }
RSS0=$(rss)
"$BIN" bench serve --url "$URL" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --prompt-len 64 --max-tokens 16 \
    --time-limit-s 1200 --json "$OUT_DIR/soak.json" | tee "$OUT_DIR/table1.txt"
RSS1=$(rss)
"$BIN" bench serve --url "$URL" --concurrency "$CONCURRENCY" --requests "$REQUESTS" --prompt-len 64 --max-tokens 16 \
    --time-limit-s 1200 --json "$OUT_DIR/soak2.json" | tee "$OUT_DIR/table2.txt"
RSS2=$(rss)
curl -s "$URL/metrics" > "$OUT_DIR/metrics.txt" || python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('$URL/metrics').read().decode())" > "$OUT_DIR/metrics.txt"
kill -TERM $PID
set +e; wait $PID; RC=$?; set -e
trap - EXIT
{
  echo "rss_kib start=$RSS0 after_pass1=$RSS1 after_pass2=$RSS2"
  grep -E '^headroom_(requests_running|requests_waiting|kv_blocks_used|kv_blocks_free|engine_finished_total|engine_cancelled_total|admission_refused_total) ' "$OUT_DIR/metrics.txt"
  echo "exit_code_after_sigterm=$RC"
} | tee "$OUT_DIR/summary.txt"
test "$RC" = 0
