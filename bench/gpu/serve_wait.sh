# Sourced by the GPU scripts that start `headroom serve` in the background
# (and by docs/perf/data/serving-s31/w1_arm.sh for the call scripts):
# `serve_listening LOG PID HALF_SECONDS` returns 0 once the server PID has
# written its "listening on" line to LOG, 1 if it exits or HALF_SECONDS
# half-seconds pass first.
serve_listening() {
  for _ in $(seq 1 "$3"); do
    grep -q "listening on" "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.5
  done
  return 1
}
