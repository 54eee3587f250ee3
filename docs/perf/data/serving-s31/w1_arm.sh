# Sourced by session 31's call scripts: `w1 ARM BIN MODEL PORT` starts a
# fresh `BIN serve` of the synthetic MODEL, loads it with W1 (1,000 x 1,024
# / 128 at c = 512), prints output tok/s, TTFT p50 and ITL p50, and stops
# the server. Logs and the bench's JSON go to $O.
w1() {
  "$2" serve --backend cuda --synthetic "$3" --port "$4" > "$O/serve-$1.log" 2>&1 &
  local sp=$!
  for _ in $(seq 1 400); do grep -q "listening on" "$O/serve-$1.log" && break; sleep 0.5; done
  timeout 120 "$2" bench serve --url "http://127.0.0.1:$4" --json "$O/w1-$1.json" --concurrency 512 \
    --requests 1000 --prompt-len 1024 --max-tokens 128 > "$O/w1-$1.txt" 2>&1
  echo "$1: $(grep -E 'output tok/s' "$O/w1-$1.txt" | head -1 | sed 's/.*flowed: //' | cut -c1-40) | $(grep -E '^ttft' "$O/w1-$1.txt" | awk '{print "ttft p50", $4}') | $(grep -E '^itl' "$O/w1-$1.txt" | awk '{print "itl p50", $4}') (t=$SECONDS)"
  kill -TERM $sp; wait $sp
}
