#!/usr/bin/env bash
# On the build machine: builds the release headroom binary and the named GPU
# test binaries, strips them and packs them into DIR/bins.tar.xz as h/headroom
# and h/<test> (pass `carry: ["DIR"]` to the device call; unpack there with
# `tar -xJf DIR/bins.tar.xz -C /tmp/x`).
# Usage: bench/gpu/pack_bins.sh DIR [CRATE:TEST ...]
#   e.g. bench/gpu/pack_bins.sh .devbin/s25a headroom-engine:cuda_graphs
# CRATE:lib packs the crate's library unit tests as h/lib_<crate> (dashes as
# underscores: headroom-hardware:lib -> h/lib_headroom_hardware), as
# pack_tests.sh names them.
# EXTRA_BINS="NAME=PATH ..." packs more binaries (built elsewhere, e.g. from
# an experiment branch's worktree) as h/NAME.
# Worktrees may share one CARGO_TARGET_DIR: the sources that differ from
# what the last pack there built are touched first (bench/gpu/source_manifest.py),
# so the archive holds this tree's code, not a library cargo thought fresh.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [CRATE:TEST ...]" >&2; exit 1; }
DIR=$1; shift
cd "$(dirname "$0")/../.."
T=${CARGO_TARGET_DIR:-target}
# build: the release binary and each CRATE:TEST's test binary; NAMES[i] is
# what EXES[i] is packed as.
build() {
  NAMES=(headroom); EXES=("$T/release/headroom")
  cargo build --release -p headroom
  local spec crate test what name exe
  for spec in "$@"; do
    crate=${spec%%:*}; test=${spec#*:}
    [ "$crate" != "$spec" ] || { echo "$spec: not CRATE:TEST" >&2; exit 1; }
    if [ "$test" = lib ]; then
      what=(--lib); name=lib_${crate//-/_}
    else
      what=(--test "$test"); name=$test
    fi
    exe=$(cargo test --release -p "$crate" "${what[@]}" --no-run --message-format=json 2>/dev/null |
      python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    t=m.get("target", {})
    if m.get("reason")=="compiler-artifact" and m.get("executable") and (
        "lib" in t.get("kind", []) if sys.argv[1]=="lib" else t.get("name")==sys.argv[1]):
        print(m["executable"])' "$test" | tail -n1)
    [ -n "$exe" ] || { echo "$spec: no test binary built" >&2; exit 1; }
    NAMES+=("$name"); EXES+=("$exe")
  done
}
# Worktrees sharing the target folder: touch what differs from the sources
# the last pack built (bench/gpu/source_manifest.py says why), build, record.
touched=$(python3 bench/gpu/source_manifest.py touch "$(pwd -P)" "$T/release" | wc -l)
echo "pack_bins: $touched source(s) touched (changed since the last pack in $T; all where none was recorded or another release build came between)" >&2
build "$@"
python3 bench/gpu/source_manifest.py record "$(pwd -P)" "$T/release"
P=$(mktemp -d); mkdir -p "$P/h"
for i in "${!NAMES[@]}"; do cp "${EXES[$i]}" "$P/h/${NAMES[$i]}"; done
for extra in ${EXTRA_BINS:-}; do
  name=${extra%%=*}; path=${extra#*=}
  [ -x "$path" ] && [ "$name" != "$extra" ] || { echo "$extra: not NAME=PATH of a binary" >&2; exit 1; }
  cp "$path" "$P/h/$name"
done
for f in "$P"/h/*; do strip "$f"; done
mkdir -p "$DIR"
tar -C "$P" -cJf "$DIR/bins.tar.xz" h
rm -rf "$P"
ls -la "$DIR"
