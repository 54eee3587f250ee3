#!/usr/bin/env python3
"""round_bf16.py SRC DST [--all]: copies a checkpoint folder, rounding the f32
tensors of model.safetensors to the nearest bf16 (ties to even), kept as f32.

By default only the tensors the CUDA backend stores in bf16 are rounded: the
matrices (two or more dims), except the GDN conv weight (`*conv1d.weight`,
uploaded as an f32 vector like the norms, `A_log` and `dt_bias`). The CPU
backend (f32) run on that copy is the baseline of issue 8's CUDA bar (the
same as `Precision::BF16_WEIGHTS` of headroom-cpu; the test
`bf16_matrices_round_the_weights_and_nothing_else` of
crates/model/tests/bf16_emulation.rs checks that rule). `--all` rounds every
f32 tensor (vectors too), the old baseline of bench/gpu/check_model.sh.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def stored_as_bf16(name, meta):
    return len(meta["shape"]) >= 2 and not name.endswith("conv1d.weight")


def main(src, dst, every):
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        if f != "model.safetensors":
            shutil.copy(os.path.join(src, f), dst)
    raw = open(os.path.join(src, "model.safetensors"), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        if not every and not stored_as_bf16(name, meta):
            continue
        s, e = meta["data_offsets"]
        a = np.frombuffer(bytes(data[s:e]), dtype="<u4").astype(np.uint64)
        r = ((a + 0x7FFF + ((a >> 16) & 1)) & 0xFFFF0000).astype("<u4")
        data[s:e] = r.tobytes()
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(raw[:8 + n] + bytes(data))


if __name__ == "__main__":
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(paths) != 2 or any(f != "--all" for f in flags):
        sys.exit(__doc__)
    main(paths[0], paths[1], "--all" in flags)
