#!/usr/bin/env bash
# Session 25's H200 call, step 1 on the build machine: the release headroom
# binary and the engine's graph test binary, packed into .devbin/s25a
# (carry .devbin/s25a to call1.sh).
set -euo pipefail
cd "$(dirname "$0")/../../../../.."
exec bash bench/gpu/pack_bins.sh .devbin/s25a headroom-engine:cuda_graphs
