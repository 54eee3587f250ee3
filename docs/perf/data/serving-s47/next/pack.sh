#!/usr/bin/env bash
# After session 47: packs every arm that ../../serving-s46/next/call.sh carries, from a fresh
# checkout of main, in one go (session 47 began on a new build machine: no .devbin, no target
# folder, so every arm had to be built again). Run from the repository root:
#   bash docs/perf/data/serving-s47/next/pack.sh
# Arms (each .devbin/ARM/bins.tar.xz, bench/gpu/pack_bins.sh's archive):
#   ga, gdn, head  main (one release build, three archives): ga with the gdn tests (call5's
#                  main arm), gdn with gdn_decode_timing + fused_decode (call3's main arm), head
#                  with the hardware library's tests (as the earlier READMEs pack it; call4 and
#                  call3's second part run its headroom binary)
#   gb             branch gdnbulk (the narrow and wide scans by bulk copies) with gdn
#   gp, gp2        branches gdnpersist, gdnpersist2 with gdn_decode_timing + fused_decode
# The branches are built in worktrees under $WT (default /tmp/wt-s47), sharing
# CARGO_TARGET_DIR with main (pack_bins.sh touches what differs, so no arm packs another's
# library). Each archive is checked by the kernel text it must (or must not) hold, as
# ../../serving-s46/next/README.md says; any failed check stops the script (exit 1).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}
WT=${WT:-/tmp/wt-s47}
ROOT=$(pwd)
t0=$(date +%s)
say() { echo "pack.sh: $* ($(( $(date +%s) - t0 )) s)" >&2; }

# holds ARM NEEDLE MIN: the archive's binaries hold NEEDLE at least MIN times (0: exactly none).
holds() {
  local arm=$1 needle=$2 min=$3 d n
  d=$(mktemp -d); tar -xJf "$ROOT/.devbin/$arm/bins.tar.xz" -C "$d"
  n=$(cat "$d"/h/* | grep -a -c -- "$needle" || true)
  rm -rf "$d"
  if { [ "$min" = 0 ] && [ "$n" != 0 ]; } || { [ "$min" != 0 ] && [ "$n" -lt "$min" ]; }; then
    echo "pack.sh: .devbin/$arm holds '$needle' $n times, expected $([ "$min" = 0 ] && echo none || echo "at least $min")" >&2
    exit 1
  fi
  say "$arm: '$needle' $n time(s): as expected"
}

# branch_tree BRANCH: a worktree that has BRANCH checked out (one under $WT is made where
# none has), printed.
branch_tree() {
  local dir
  dir=$(git worktree list --porcelain | awk -v b="refs/heads/$1" \
    '/^worktree /{w=substr($0, 10)} $0=="branch " b {print w}' | head -n1)
  if [ -z "$dir" ]; then dir=$WT/$1; git worktree add -q "$dir" "$1" >&2; fi
  # A branch from before session 45's fix packs with a pack_bins.sh that does not touch what
  # differs, and can carry main's library under the branch's name (session 47 met it).
  if ! grep -q source_manifest "$dir/bench/gpu/pack_bins.sh"; then
    echo "pack.sh: branch $1's bench/gpu/pack_bins.sh predates the source manifest; rebase it on main first" >&2
    exit 1
  fi
  echo "$dir"
}

say "main: release build + gdn, gdn_decode_timing, fused_decode, hardware lib"
bash bench/gpu/pack_bins.sh .devbin/ga headroom-cuda:gdn
bash bench/gpu/pack_bins.sh .devbin/gdn headroom-cuda:gdn_decode_timing headroom-cuda:fused_decode
bash bench/gpu/pack_bins.sh .devbin/head headroom-hardware:lib
holds ga 'cp.async.bulk.shared::cluster.global' 0

say "gdnbulk"
d=$(branch_tree gdnbulk)
(cd "$d" && bash bench/gpu/pack_bins.sh "$ROOT/.devbin/gb" headroom-cuda:gdn)
holds gb 'cp.async.bulk.shared::cluster.global' 1
holds gb 'No proxy fence: the copies' 1

for b in gdnpersist:gp gdnpersist2:gp2; do
  say "${b%%:*}"
  d=$(branch_tree "${b%%:*}")
  (cd "$d" && bash bench/gpu/pack_bins.sh "$ROOT/.devbin/${b#*:}" headroom-cuda:gdn_decode_timing \
    headroom-cuda:fused_decode)
done
holds gp 'gdn_decode_step_persistent_bf16' 1
holds gp2 'gdn_decode_step_persistent_bf16' 1
holds gdn 'gdn_decode_step_persistent_bf16' 0

du -ch .devbin/{ga,gb,gdn,gp,gp2,head}/bins.tar.xz | tail -1
say "done: carry [\".devbin/ga\", \".devbin/gb\", \".devbin/head\", \".devbin/gdn\", \".devbin/gp\", \".devbin/gp2\"]"
