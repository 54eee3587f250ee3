#!/usr/bin/env python3
"""A held-out probe of bad and edge inputs against a release `headroom` binary
on the CPU tiny model (Python 3 standard library only).

Every case names its input and the class it must get:

* ``error``  - the command exits 1 with a message naming the input (a needle,
  case-insensitive) and no panic;
* ``ok``     - the command exits 0;
* ``warn``   - the command exits 0 with a warning naming the input (the
  documented lenient flags: an unknown attention control falls back to
  ``fallback``, a bad query block to 128, a missing or invalid qualification
  folder or entry is skipped, an invalid ``--log`` directive is ignored);
* ``4xx``    - the server answers 400..499 with an OpenAI error object whose
  message or ``param`` names the field;
* ``2xx``    - the server answers 200 (a stream ends with ``[DONE]``).

A case fails on a panic (exit 101 or "panicked"), a hang (timeout), a 500, a
connection closed without an answer, a server that stops answering
``/health``, data loss (an input overwritten), or any other class than
expected (silent acceptance of a bad input is ``2xx`` where ``4xx`` was
expected).

Usage: python3 bench/probe/probe.py [--bin target/release/headroom]
       [--only SUBSTRING] [--json OUT.json] [--verbose]
Exit status: 0 when every case got its class, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time

from cases_cli import cli_flag_cases, qualify_cases
from cases_files import file_cases
from cases_server import context_cases, server_field_cases, server_protocol_cases
from harness import RESULTS, ROOT, S
from http_probe import Server


def summary():
    by_group = {}
    for r in RESULTS:
        g = by_group.setdefault(r.group, [0, 0])
        g[0] += 1
        g[1] += 0 if r.ok else 1
    classes = {}
    for r in RESULTS:
        classes[r.expect] = classes.get(r.expect, 0) + 1
    fails = [r for r in RESULTS if not r.ok]
    print(f"\n{len(RESULTS)} cases, {len(RESULTS) - len(fails)} as expected, {len(fails)} findings")
    print("by group: " + ", ".join(f"{g} {n}" + (f" ({f} failed)" if f else "")
                                  for g, (n, f) in sorted(by_group.items())))
    print("expected classes: " + ", ".join(f"{c} {n}" for c, n in sorted(classes.items())))
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "headroom"))
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--port", type=int, default=0)
    S.args = ap.parse_args()
    S.args.bin = os.path.abspath(S.args.bin)
    if not os.access(S.args.bin, os.X_OK):
        raise SystemExit(f"no headroom binary at {S.args.bin}: cargo build --release -p headroom")
    S.work = tempfile.mkdtemp(prefix="headroom-probe-")
    start = time.time()
    try:
        cli_flag_cases()
        file_cases()
        qualify_cases()
        port = S.args.port or free_port()
        S.server = Server(port)
        try:
            server_field_cases()
            server_protocol_cases()
            context_cases()
        finally:
            S.server.stop()
    finally:
        shutil.rmtree(S.work, ignore_errors=True)
    fails = summary()
    print(f"took {time.time() - start:.0f} s")
    if S.args.json:
        with open(S.args.json, "w") as f:
            json.dump([r.__dict__ for r in RESULTS], f, indent=1)
    sys.exit(1 if fails else 0)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


if __name__ == "__main__":
    main()
