#!/usr/bin/env python3
"""Relative Frobenius error of logits files: compare_logits.py [--value] GOT WANT [TOL].

Reads the `logits` tensor of two safetensors files (no torch needed: the
header is JSON, the data f32 little-endian), prints `rel_err=... ok|FAIL
(tol ...)` — or with `--value` only the error (`%.3e`, `nan` for non-finite
logits, `shape` for a shape mismatch) — and exits 1 when the error exceeds
TOL (default 2e-2), GOT holds a non-finite value or the shapes differ.
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


def main(argv):
    value_only = "--value" in argv
    args = [a for a in argv if a != "--value"]
    got, want = read(args[0]), read(args[1])
    tol = float(args[2]) if len(args) > 2 else 2e-2
    if got.shape != want.shape:
        print("shape" if value_only else f"shape {got.shape} != {want.shape}")
        return 1
    if not np.isfinite(got).all():
        print("nan" if value_only else "non-finite logits")
        return 1
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)
    ok = err <= tol
    if value_only:
        print(f"{err:.3e}")
    else:
        print(f"rel_err={err:.3e} {'ok' if ok else 'FAIL'} (tol {tol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
