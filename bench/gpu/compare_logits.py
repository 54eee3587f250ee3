#!/usr/bin/env python3
"""Relative Frobenius error of logits files: compare_logits.py GOT WANT [TOL].

Reads the `logits` tensor of two safetensors files (no torch needed: the
header is JSON, the data f32 little-endian), prints `rel_err=...` and exits
1 when the error exceeds TOL (default 2e-2) or GOT holds a non-finite value.
"""
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        meta = header["logits"]
        assert meta["dtype"] == "F32", meta
        start, end = meta["data_offsets"]
        f.seek(8 + n + start)
        data = np.frombuffer(f.read(end - start), dtype="<f4")
    return data.reshape(meta["shape"]).astype(np.float64)


def main():
    got, want = read(sys.argv[1]), read(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 2e-2
    if got.shape != want.shape:
        print(f"shape {got.shape} != {want.shape}")
        return 1
    if not np.isfinite(got).all():
        print("non-finite logits")
        return 1
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)
    ok = err <= tol
    print(f"rel_err={err:.3e} {'ok' if ok else 'FAIL'} (tol {tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
