#!/usr/bin/env bash
# Kernel artifact gate: installs NVRTC 13.0 and the CUDA headers from PyPI wheels
# (no GPU, no toolkit needed), then builds every CUDA kernel for sm_90a and verifies
# the artifact against the sources embedded in the binary. Fails loudly on any miss.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE="${HEADROOM_NVRTC_CACHE:-$PWD/.cache/nvrtc}"
NVRTC_WHEEL="nvidia-cuda-nvrtc==13.0.88"
RUNTIME_WHEEL="nvidia-cuda-runtime==13.0.96"
STAMP="$CACHE/.installed-13.0.88-13.0.96"

if [ ! -f "$STAMP" ]; then
    echo "kernel-gate: installing $NVRTC_WHEEL and $RUNTIME_WHEEL into $CACHE"
    rm -rf "$CACHE"
    mkdir -p "$CACHE"
    python3 -m pip install --quiet --no-deps --target "$CACHE" "$NVRTC_WHEEL" "$RUNTIME_WHEEL"
    touch "$STAMP"
fi

LIBDIR="$(dirname "$(find "$CACHE" -name 'libnvrtc.so.13' | head -n1)")"
INCDIR="$(dirname "$(find "$CACHE" -path '*cu13/include/cuda_bf16.h' | head -n1)")"
if [ ! -f "$LIBDIR/libnvrtc.so.13" ] || [ ! -f "$INCDIR/cuda_fp16.h" ]; then
    echo "kernel-gate: FAILED: libnvrtc.so.13 or the CUDA headers not found under $CACHE" >&2
    exit 1
fi
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HEADROOM_CUDA_INCLUDE="$INCDIR"

OUTDIR="${1:-target/kernel-artifact}"
BIN="${HEADROOM_BIN:-target/release/headroom}"
if [ -z "${HEADROOM_BIN:-}" ]; then
    cargo build --release -p headroom
fi

echo "kernel-gate: headroom kernels build --arch sm_90a --out $OUTDIR"
if ! "$BIN" kernels build --arch sm_90a --out "$OUTDIR"; then
    echo "kernel-gate: FAILED: a kernel did not compile" >&2
    exit 1
fi
echo "kernel-gate: headroom kernels verify $OUTDIR"
if ! "$BIN" kernels verify "$OUTDIR"; then
    echo "kernel-gate: FAILED: the artifact does not verify" >&2
    exit 1
fi
# The NVRTC tests are #[ignore]d in a plain `cargo test` (no NVRTC there); run exactly those here.
echo "kernel-gate: cargo test -p headroom-cuda --lib -- --ignored (the NVRTC compile, cache and gate tests)"
if ! cargo test -p headroom-cuda --release --lib -- --ignored; then
    echo "kernel-gate: FAILED: headroom-cuda tests with NVRTC" >&2
    exit 1
fi
echo "kernel-gate: passed"
