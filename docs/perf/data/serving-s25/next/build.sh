#!/usr/bin/env bash
# Session 25's H200 call, step 1 on the build machine: the release headroom
# binary and the engine's graph test binary, packed into .devbin/s25a
# (carry .devbin/s25a to call1.sh), with headroom-noupd: the release binary
# of branch graphs-noupd (every graphed step instantiates its own graph),
# built in a worktree of it: NOUPD=<its target dir>/release/headroom.
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
: "${NOUPD:?set NOUPD to the release headroom binary of branch graphs-noupd}"
EXTRA_BINS="headroom-noupd=$NOUPD" exec bash bench/gpu/pack_bins.sh .devbin/s25a headroom-engine:cuda_graphs
