# Sourced by the call scripts since session 31: `w1 ARM BIN MODEL PORT`
# starts a fresh `BIN serve` of the synthetic MODEL, loads it with W1 (1,000
# x 1,024 / 128 at c = 512), prints output tok/s, TTFT p50 and ITL p50 (and,
# from session 42's main on, the GPU's joules per token and clock), and
# stops the server. W1_SERVE_FLAGS (default none) are added to `serve`
# (session 37: the step budget). Logs and the bench's JSON go to $O. A server that exits,
# or does not listen within W1_START_S seconds (default 200; a fresh
# machine's first start compiles the kernels), is reported with the GPU's
# utilisation and memory and killed, and the bench is skipped (session 34:
# a start that hung cost 200 s of waiting and the bench's 120 s).
#
# `serve_listening LOG PID HALF_SECONDS` (bench/gpu/serve_wait.sh, sourced
# here for the call scripts that use it, e.g. serving-s34/next/wswatch.sh):
# 0 once the server PID has written its "listening on" line to LOG, 1 if it
# exits or HALF_SECONDS half-seconds pass first.
source bench/gpu/serve_wait.sh
w1() {
  "$2" serve --backend cuda --synthetic "$3" --port "$4" ${W1_SERVE_FLAGS:-} > "$O/serve-$1.log" 2>&1 &
  local sp=$!
  if ! serve_listening "$O/serve-$1.log" $sp $((2 * ${W1_START_S:-200})); then
    echo "$1: the server did not start ($(kill -0 $sp 2>/dev/null && echo 'still running' || echo exited);" \
      "GPU $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader); t=$SECONDS)"
    tail -c 400 "$O/serve-$1.log"
    kill -9 $sp 2>/dev/null; wait $sp 2>/dev/null
    return 1
  fi
  timeout 120 "$2" bench serve --url "http://127.0.0.1:$4" --json "$O/w1-$1.json" --concurrency 512 \
    --requests 1000 --prompt-len 1024 --max-tokens 128 > "$O/w1-$1.txt" 2>&1
  echo "$1: $(grep -E 'output tok/s' "$O/w1-$1.txt" | head -1 | sed 's/.*flowed: //' | cut -c1-40) | $(grep -E '^ttft' "$O/w1-$1.txt" | awk '{print "ttft p50", $4}') | $(grep -E '^itl' "$O/w1-$1.txt" | awk '{print "itl p50", $4}') (t=$SECONDS)"
  echo "  $1: GPU memory used after the run: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  # The server's GPU over the run (bench serve's `gpu:` line; from session 42's main on).
  grep -E '^gpu:' "$O/w1-$1.txt" | sed "s/^/  $1: /" | cut -c1-220
  kill -TERM $sp; wait $sp
}
