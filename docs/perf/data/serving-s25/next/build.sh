#!/usr/bin/env bash
# Session 25's H200 calls, step 1 on the build machine: the release headroom
# binary and the engine's GPU test binaries (cuda_graphs, cuda_engine),
# stripped and packed into .devbin/s25a/bins.tar.xz (carry .devbin/s25a).
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
T=${CARGO_TARGET_DIR:-target}
cargo build --release -p headroom
pick() { # CRATE TEST: the test binary cargo just built
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]==sys.argv[1]: print(m["executable"])' "$2" | tail -n1
}
P=$(mktemp -d); mkdir -p "$P/h"
cp "$T/release/headroom" "$P/h/"
cp "$(pick headroom-engine cuda_graphs)" "$P/h/cuda_graphs"
cp "$(pick headroom-engine cuda_engine)" "$P/h/cuda_engine"
for f in "$P"/h/*; do strip "$f"; done
mkdir -p .devbin/s25a
tar -C "$P" -cJf .devbin/s25a/bins.tar.xz h
ls -la .devbin/s25a "$P/h"
