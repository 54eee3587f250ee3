#!/usr/bin/env python3
"""Which sources a release build in a shared target folder must recompile.

Usage: source_manifest.py touch  TREE RELEASE_DIR
       source_manifest.py record TREE RELEASE_DIR

Cargo calls a unit fresh when none of its source files is newer than its
output. Worktrees of one repository sharing a target folder
(`CARGO_TARGET_DIR`) build the workspace's crates under the same names, so
after a build in worktree A, worktree B's files that differ from A's but were
written before A's build look fresh to cargo in B, and B gets A's library
without a word (session 45: `pack_bins.sh` packed main's GDN kernels for a
branch). `pack_bins.sh` therefore keeps, in RELEASE_DIR, the SHA-1 of every
source it last built (`record`, after the build), and before the next build
`touch`es this tree's sources whose content differs from that record (or
that are new), so cargo recompiles exactly what changed. If there is no
record, or a release build ran in RELEASE_DIR since (a file under
RELEASE_DIR/.fingerprint newer than the record: built from a tree nobody
recorded), every source is touched. The sources: the files git lists (tracked,
or untracked and not ignored) under `crates/` and `qualifications/`, and
`Cargo.toml`, `Cargo.lock`. `touch` prints the touched paths, one a line.
Exit status 0, or 2 on bad arguments.
"""

import hashlib
import json
import os
import subprocess
import sys

RECORD = ".headroom_source_manifest.json"
ROOTS = ["crates", "qualifications", "Cargo.toml", "Cargo.lock"]


def sources(tree):
    """{path relative to TREE: SHA-1 of its content} of the build's sources."""
    out = subprocess.run(
        ["git", "-C", tree, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--"] + ROOTS,
        check=True, capture_output=True).stdout
    manifest = {}
    for rel in sorted(set(p for p in out.decode().split("\0") if p)):
        path = os.path.join(tree, rel)
        if os.path.isfile(path):
            with open(path, "rb") as f:
                manifest[rel] = hashlib.sha1(f.read()).hexdigest()
    return manifest


def built_since(release, record):
    """Whether a release build wrote a fingerprint after the record."""
    since = os.path.getmtime(record)
    for root, _, files in os.walk(os.path.join(release, ".fingerprint")):
        for name in files:
            if os.path.getmtime(os.path.join(root, name)) > since:
                return True
    return False


def to_touch(tree, release):
    now = sources(tree)
    record = os.path.join(release, RECORD)
    if not os.path.isfile(record) or built_since(release, record):
        return sorted(now)
    with open(record) as f:
        then = json.load(f)
    return sorted(rel for rel, digest in now.items() if then.get(rel) != digest)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("touch", "record") or not os.path.isdir(sys.argv[2]):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    command, tree, release = sys.argv[1:]
    if command == "record":
        os.makedirs(release, exist_ok=True)
        with open(os.path.join(release, RECORD), "w") as f:
            json.dump(sources(tree), f)
        return
    for rel in to_touch(tree, release):
        os.utime(os.path.join(tree, rel))
        print(rel)


if __name__ == "__main__":
    main()
