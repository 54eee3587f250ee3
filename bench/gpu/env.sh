# Sourced by the GPU scripts: puts NVRTC, cuBLAS and the CUDA driver on the
# library path and points HEADROOM_CUDA_INCLUDE at the CUDA headers, from a
# toolkit or from the NVIDIA wheels of the machine's Python.
find_first() { # NAME DIRS...
    local name=$1; shift
    for d in "$@"; do
        [ -d "$d" ] || continue
        local f; f=$(find "$d" -name "$name" 2>/dev/null | head -n1)
        if [ -n "$f" ]; then dirname "$f"; return 0; fi
    done
    return 1
}
PYSITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
ROOTS=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$PYSITE/nvidia" /usr/local /opt)
NVRTC_DIR=$(find_first 'libnvrtc.so.13' "${ROOTS[@]}") || { echo "env: libnvrtc.so.13 not found" >&2; }
CUBLAS_DIR=$(find_first 'libcublas.so.13' "${ROOTS[@]}") || { echo "env: libcublas.so.13 not found" >&2; }
if [ -z "${HEADROOM_CUDA_INCLUDE:-}" ]; then
    HEADROOM_CUDA_INCLUDE=$(find_first 'cuda_bf16.h' /usr/local/cuda/include "$PYSITE/nvidia" /usr/local /opt) || echo "env: cuda_bf16.h not found" >&2
fi
export HEADROOM_CUDA_INCLUDE
export LD_LIBRARY_PATH="${NVRTC_DIR:+$NVRTC_DIR:}${CUBLAS_DIR:+$CUBLAS_DIR:}${LD_LIBRARY_PATH:-}"
echo "env: nvrtc=$NVRTC_DIR cublas=$CUBLAS_DIR include=$HEADROOM_CUDA_INCLUDE"
