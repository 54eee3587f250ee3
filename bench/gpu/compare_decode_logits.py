#!/usr/bin/env python3
"""Compares two `headroom logits` outputs (safetensors, one f32 tensor `logits`
[positions][vocab]) of the same prompt: relative RMS difference per position
and over all, and how many positions agree on the arg-max. Used by
check_decode.sh to compare the MoE decode path with the grouped-GEMM path
through the whole model (prompt fed one token per step: every MoE call has
one row). Exits 1 when the relative RMS difference exceeds MAX (if given).
Usage: compare_decode_logits.py A.safetensors B.safetensors [MAX]"""
import json
import struct
import sys

import numpy as np


def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    meta = json.loads(raw[8 : 8 + n])["logits"]
    start, end = meta["data_offsets"]
    data = np.frombuffer(raw[8 + n + start : 8 + n + end], dtype=np.float32)
    return data.reshape(meta["shape"]).astype(np.float64)


a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.shape == b.shape, (a.shape, b.shape)
assert np.isfinite(a).all() and np.isfinite(b).all(), "non-finite logits"
per = np.sqrt(((a - b) ** 2).sum(1) / (a**2).sum(1))
total = np.sqrt(((a - b) ** 2).sum() / (a**2).sum())
same = int((a.argmax(1) == b.argmax(1)).sum())
print(f"logits {a.shape}: rel RMS diff {total:.3e} (first position {per[0]:.3e}, "
      f"max per position {per.max():.3e}); arg-max equal at {same} of {a.shape[0]} positions")
limit = float(sys.argv[3]) if len(sys.argv) > 3 else None
sys.exit(1 if limit is not None and not total <= limit else 0)
