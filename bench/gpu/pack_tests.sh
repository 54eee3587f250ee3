#!/usr/bin/env bash
# On the build machine: builds every test binary that holds GPU tests (the
# cuda crate's library and integration tests, the engine's `cuda_*` tests, the
# hardware crate's library tests: NVML's clock and power),
# strips them and packs them into DIR/bins.tar.xz as t/<name> for
# bench/gpu/check_all.sh (carry DIR to the device call).
# Usage: bench/gpu/pack_tests.sh DIR
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 1; }
DIR=$1
cd "$(dirname "$0")/../.."
T=${CARGO_TARGET_DIR:-target}
# Worktrees sharing the target folder: touch what differs from the sources
# the last pack built (bench/gpu/source_manifest.py says why), as pack_bins.sh.
touched=$(python3 bench/gpu/source_manifest.py touch "$(pwd -P)" "$T/release" | wc -l)
echo "pack_tests: $touched source(s) touched (changed since the last pack in $T; all where none was recorded or another release build came between)" >&2
P=$(mktemp -d)
mkdir -p "$P/t"
list() {
  cargo test --release "$@" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        t = m["target"]
        name = "lib_" + t["name"].replace("-", "_") if "lib" in t["kind"] else t["name"]
        print(name, m["executable"])'
}
engine_tests=$(ls crates/engine/tests/cuda_*.rs | xargs -n1 basename | sed 's/\.rs$//' | sed 's/^/--test /')
# shellcheck disable=SC2086
{ list -p headroom-cuda --lib --tests; list -p headroom-engine $engine_tests; list -p headroom-hardware --lib; } | while read -r name exe; do
  cp "$exe" "$P/t/$name"
  strip "$P/t/$name"
done
n=$(ls "$P/t" | wc -l)
[ "$n" -gt 0 ] || { echo "no test binaries built" >&2; exit 1; }
python3 bench/gpu/source_manifest.py record "$(pwd -P)" "$T/release"
mkdir -p "$DIR"
tar -C "$P" -cJf "$DIR/bins.tar.xz" t
# The tests find their fixtures through the checkout's path at build time;
# check_all.sh links it to the device's checkout.
pwd > "$DIR/built-at"
rm -rf "$P"
echo "packed $n test binaries into $DIR/bins.tar.xz ($(du -h "$DIR/bins.tar.xz" | cut -f1))"
