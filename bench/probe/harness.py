"""The probe's harness: its settings, the shared state of a run (`S`: the
parsed arguments, the scratch folder, the server under test), the results
and `record`, and `cli`, which runs one command and checks its class."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "crates", "model", "tests", "fixtures", "dense_d64")
CLI_TIMEOUT = 60
HTTP_TIMEOUT = 30
SERVE_CONTEXT = 512


class State:
    """What a run shares: `args` (argparse), `work` (the scratch folder every
    command runs in) and `server` (the `Server` under test, once started)."""
    args = None
    work = None
    server = None


S = State()


class Result:
    def __init__(self, case, group, expect, got, ok, detail):
        self.case, self.group, self.expect = case, group, expect
        self.got, self.ok, self.detail = got, ok, detail


RESULTS = []


def record(case, group, expect, got, ok, detail):
    RESULTS.append(Result(case, group, expect, got, ok, detail))
    mark = "ok  " if ok else "FAIL"
    if not ok or S.args.verbose:
        print(f"{mark} [{group}] {case}: expected {expect}, got {got}: {detail[:300]}")


def cli(case, args, expect, needles=(), group="cli", stdin=None, env=None, timeout=CLI_TIMEOUT,
        serving=False):
    """Runs `headroom S.args` and checks its class (`serving`: a command still
    running at the timeout is a server that started, class `ok`)."""
    if S.args.only and S.args.only not in case:
        return
    full_env = dict(os.environ, HEADROOM_BUILTIN_QUALIFICATIONS="off", NO_COLOR="1")
    full_env.update(env or {})
    try:
        p = subprocess.run(
            [S.args.bin] + args,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env=full_env,
            cwd=S.work,
        )
    except subprocess.TimeoutExpired:
        if serving:
            record(case, group, expect, "ok", expect == "ok", f"serving after {timeout} s")
        else:
            record(case, group, expect, "hang", False, f"no exit in {timeout} s")
        return
    err = p.stderr.decode("utf-8", "replace")
    said = err + p.stdout.decode("utf-8", "replace")
    if p.returncode == 101 or "panicked" in err:
        record(case, group, expect, "panic", False, err.strip()[-400:])
        return
    if p.returncode == 0:
        got = "warn" if expect == "warn" and "WARN" in err else "ok"
    elif p.returncode == 1:
        got = "error"
    elif p.returncode == 2 and "error:" in err:
        # clap's usage errors exit 2: a clean refusal naming the argument.
        got = "error"
    else:
        got = f"exit {p.returncode}"
    detail = err.strip().splitlines()[-1] if err.strip() else ""
    ok = got == expect
    if ok and expect in ("error", "warn"):
        low = said.lower()
        # A flag may be named as itself or as its setting (`--max-context` / `max_context`).
        missing = [n for n in needles
                   if n.lower() not in low and n.lower().lstrip("-").replace("-", "_") not in low]
        if missing:
            ok = False
            detail = f"message does not name {missing}: {said.strip()[-300:]}"
    record(case, group, expect, got, ok, detail)
    return p


BASE_GEN = ["generate", "--synthetic", "tiny-d256", "--prompt", "hi", "--max-tokens", "2"]


def gen(case, extra, expect, needles=(), **kw):
    cli(case, BASE_GEN + extra, expect, needles, group="cli-generate", **kw)
