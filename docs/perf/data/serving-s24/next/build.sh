#!/usr/bin/env bash
# Session 24's prepared H200 calls (run.sh beside this), step 1 on the build
# machine: the release headroom binary and the GPU test binaries of the step
# overlap (session 22), the CUDA graphs (session 23) and the engine, stripped
# and packed into .devbin/s24next/bins.tar.xz (pass `carry: [".devbin/s24next"]`
# to the device call).
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
T=${CARGO_TARGET_DIR:-target}
cargo build --release -p headroom
pick() { # CRATE TEST: the newest test binary cargo just built
  cargo test --release -p "$1" --test "$2" --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]==sys.argv[1]: print(m["executable"])' "$2" | tail -n1
}
P=$(mktemp -d); mkdir -p "$P/h"
cp "$T/release/headroom" "$(pick headroom-cuda backend_ops)" "$(pick headroom-cuda graphs)" \
  "$(pick headroom-engine cuda_overlap)" \
  "$(pick headroom-engine cuda_graphs)" "$(pick headroom-engine cuda_engine)" "$P/h/"
for f in "$P"/h/*; do strip "$f"; done
mkdir -p .devbin/s24next
tar -C "$P" -cJf .devbin/s24next/bins.tar.xz h
ls -la .devbin/s24next "$P/h"
