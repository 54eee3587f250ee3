# Sourced by the device-call scripts in docs/perf/data/*/ (from session 36 on):
# `source bench/gpu/call_prelude.sh ARM...` makes $O (= $OUT, or /tmp/out),
# sources env.sh, points the kernel cache at /tmp/kcache, unpacks each
# .devbin/ARM/bins.tar.xz (pack_bins.sh's archive; the call's `carry`) into
# /tmp/ARM (binaries under /tmp/ARM/h/), prints the card, and starts $SECONDS.
# An ARM whose archive was not carried is skipped with one line. It also
# defines pack_outputs (bench/gpu/pack_outputs.sh), which a call runs last.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
source bench/gpu/env.sh >/dev/null
export HEADROOM_KERNEL_CACHE=/tmp/kcache
for arm in "$@"; do
  if [ -f ".devbin/$arm/bins.tar.xz" ]; then
    mkdir -p "/tmp/$arm" && tar -xJf ".devbin/$arm/bins.tar.xz" -C "/tmp/$arm"
  else
    echo "call_prelude: .devbin/$arm/bins.tar.xz not carried" >&2
  fi
done
nvidia-smi --query-gpu=name,memory.total,power.limit --format=csv,noheader
SECONDS=0
source bench/gpu/pack_outputs.sh
