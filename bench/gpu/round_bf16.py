#!/usr/bin/env python3
"""round_bf16.py SRC DST: copies a checkpoint folder, rounding every f32
tensor of model.safetensors to the nearest bf16 (ties to even), kept as f32.

The CPU backend run on the copy shows how much of a bf16 backend's logits
error comes from rounding the weights alone (bench/gpu/check_model.sh).
"""
import json
import os
import shutil
import struct
import sys

import numpy as np


def main(src, dst):
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
        s, e = meta["data_offsets"]
        a = np.frombuffer(bytes(data[s:e]), dtype="<u4").astype(np.uint64)
        r = ((a + 0x7FFF + ((a >> 16) & 1)) & 0xFFFF0000).astype("<u4")
        data[s:e] = r.tobytes()
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(raw[:8 + n] + bytes(data))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
