#!/usr/bin/env bash
# Session 44, call 5 (≈ 60 s; carry [".devbin/probe"] = branch dramprobe
# (next/dramprobe.patch on main) packed by `bash bench/gpu/pack_bins.sh
# .devbin/probe headroom-cuda:dram_probe`): the DRAM read rate of a
# weight-streaming stage's access pattern. W1's decode-only step streams every
# expert's weights at 3.86 TB/s (bf16 stream kernel) and 3.56 TB/s (FP8 tile
# kernels), each stage reading 128 rows x 128 bytes of a row-major [n][K]
# matrix (pitch 4,096 / 2,048 bytes); if that pattern reads DRAM slower than
# the same bytes contiguous, a tiled expert layout is the lever, not the kernels.
# Prediction (written before the run): contiguous reads 4.0–4.4 TB/s; rows at
# pitch 4,096 −5 to −15 % of contiguous, at 2,048 −3 to −10 %; the copy
# (read + write) 3.9–4.3 TB/s; depth 4 ≥ depth 2 by 0–5 %.
source bench/gpu/call_prelude.sh probe
(cd "$O" && timeout 120 /tmp/probe/h/dram_probe --ignored --nocapture > "$O/probe.txt" 2>&1)
echo "dram_probe rc $? (t=$SECONDS)"
grep -E "^dram_probe:" "$O/probe.txt" | cut -c1-120
pack_outputs call5
echo "done (t=$SECONDS)"
