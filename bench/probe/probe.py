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
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "crates", "model", "tests", "fixtures", "dense_d64")
CLI_TIMEOUT = 60
HTTP_TIMEOUT = 30
SERVE_CONTEXT = 512


class Result:
    def __init__(self, case, group, expect, got, ok, detail):
        self.case, self.group, self.expect = case, group, expect
        self.got, self.ok, self.detail = got, ok, detail


RESULTS = []


def record(case, group, expect, got, ok, detail):
    RESULTS.append(Result(case, group, expect, got, ok, detail))
    mark = "ok  " if ok else "FAIL"
    if not ok or ARGS.verbose:
        print(f"{mark} [{group}] {case}: expected {expect}, got {got}: {detail[:300]}")


# ---------------------------------------------------------------- CLI cases


def cli(case, args, expect, needles=(), group="cli", stdin=None, env=None, timeout=CLI_TIMEOUT,
        serving=False):
    """Runs `headroom ARGS` and checks its class (`serving`: a command still
    running at the timeout is a server that started, class `ok`)."""
    if ARGS.only and ARGS.only not in case:
        return
    full_env = dict(os.environ, HEADROOM_BUILTIN_QUALIFICATIONS="off", NO_COLOR="1")
    full_env.update(env or {})
    try:
        p = subprocess.run(
            [ARGS.bin] + args,
            input=stdin,
            capture_output=True,
            timeout=timeout,
            env=full_env,
            cwd=WORK,
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


def cli_flag_cases():
    # Numbers: negative, huge, NaN, inf, zero, garbage.
    for flag in ["--max-tokens", "--top-k", "--seed", "--max-context", "--max-running",
                 "--memory-budget-mib", "--prefill-chunk", "--step-tokens",
                 "--prefix-cache-state-slots", "--prefix-cache-interval"]:
        gen(f"{flag} -1", [flag, "-1"], "error", [flag])
        gen(f"{flag} 2^64", [flag, "18446744073709551616"], "error", [flag])
        gen(f"{flag} nan", [flag, "nan"], "error", [flag])
        gen(f"{flag} empty", [flag, ""], "error", [flag])
    for flag in ["--temperature", "--top-p", "--memory-fraction"]:
        for v in ["nan", "inf", "-inf", "-1", "1e400", ""]:
            gen(f"{flag}={v}", [f"{flag}={v}"], "error", [flag])
    gen("--top-p 0", ["--top-p", "0"], "error", ["--top-p"])
    gen("--top-p 1.5", ["--top-p", "1.5"], "error", ["--top-p"])
    gen("--memory-fraction 0", ["--memory-fraction", "0"], "error", ["--memory-fraction"])
    gen("--memory-fraction 1.5", ["--memory-fraction", "1.5"], "error", ["--memory-fraction"])
    gen("--temperature 1e30 ok", ["--temperature", "1e30"], "ok")
    gen("--max-tokens 0", ["--max-tokens", "0"], "error", ["--max-tokens"])
    gen("--max-context 0", ["--max-context", "0"], "error", ["--max-context"])
    gen("--max-context 1 (prompt longer)", ["--max-context", "1"], "error", ["context"])
    gen("--max-running 0", ["--max-running", "0"], "error", ["--max-running"])
    gen("--memory-budget-mib 0", ["--memory-budget-mib", "0"], "error", ["memory"])
    gen("--prefill-chunk 0", ["--prefill-chunk", "0"], "error", ["--prefill-chunk"])
    gen("--step-tokens 0", ["--step-tokens", "0"], "error", ["--step-tokens"])
    gen("--solo-stripe abc", ["--solo-stripe", "abc"], "error", ["--solo-stripe"])
    gen("--solo-stripe -5", ["--solo-stripe", "-5"], "error", ["--solo-stripe"])
    gen("--kv bogus", ["--kv", "bogus"], "error", ["--kv"])
    gen("--backend tpu", ["--backend", "tpu"], "error", ["--backend"])
    gen("--attn-query-block -1", ["--attn-query-block", "-1"], "warn", ["--attn-query-block"])
    gen("--attn-query-block 0 (one block)", ["--attn-query-block", "0"], "ok")
    gen("--attn-query-block 2^70", ["--attn-query-block", "1180591620717411303424"], "warn",
        ["too large"])
    gen("--attn-query-block x1", ["--attn-query-block", "x1"], "warn", ["x1"])
    gen("--attn-execution bogus", ["--attn-execution", "bogus"], "warn", ["bogus"])
    gen("--log unbalanced", ["--log", "[[[=x"], "ok")
    bare = ["generate", "--synthetic", "tiny-d256", "--max-tokens", "2"]
    cli("--prompt empty", bare + ["--prompt", ""], "error", ["prompt"], group="cli-generate")
    cli("--prompt unicode", bare + ["--prompt", "日本語 🙂 \u202e mixed"], "ok",
        group="cli-generate")
    cli("--prompt 100 KB over --max-context", bare + ["--prompt", "a" * 100_000,
        "--max-context", "64"], "error", ["context"], group="cli-generate")
    cli("--prompt and --prompts", BASE_GEN + ["--prompts", "p.jsonl"], "error", ["--prompts"],
        group="cli-generate")
    cli("--synthetic unknown", ["generate", "--synthetic", "nope", "--prompt", "x"], "error",
        ["nope"], group="cli-generate")
    cli("--synthetic empty", ["generate", "--synthetic", "", "--prompt", "x"], "error",
        ["synthetic"], group="cli-generate")
    cli("--synthetic bad override", ["generate", "--synthetic", "tiny-d256:layers=-3",
        "--prompt", "x"], "error", ["layers"], group="cli-generate")
    cli("--synthetic huge override", ["generate", "--synthetic",
        "tiny-d256:layers=99999999999999", "--prompt", "x"], "error", ["layers"],
        group="cli-generate")
    cli("--synthetic and --model", ["generate", "--synthetic", "tiny-d256", "--model", FIXTURE,
        "--prompt", "x"], "error", ["--model"], group="cli-generate")
    cli("no model", ["generate", "--prompt", "x"], "error", ["--synthetic"], group="cli-generate")
    cli("unknown subcommand", ["frobnicate"], "error", ["frobnicate"])
    cli("unknown flag", ["generate", "--synthetic", "tiny-d256", "--prompt", "x", "--frob"],
        "error", ["--frob"], group="cli-generate")

    serve = ["serve", "--synthetic", "tiny-d256"]
    for flag, v in [("--port", "70000"), ("--port", "-1"), ("--port", "x"),
                    ("--shutdown-grace-s", "nan"), ("--shutdown-grace-s", "-1"),
                    ("--shutdown-grace-s", "inf"), ("--shutdown-grace-s", "1e300"),
                    ("--header-timeout-s", "0"), ("--header-timeout-s", "nan"),
                    ("--body-timeout-s", "-3"), ("--keep-alive-s", "inf"),
                    ("--write-timeout-s", "1e300"), ("--max-connections", "0"),
                    ("--max-connections", "-4"), ("--max-body-bytes", "0"),
                    ("--max-waiting", "0"), ("--default-max-tokens", "0"),
                    ("--default-max-tokens", "-1"), ("--api-key", ""),
                    ("--enable-thinking", "maybe"), ("--memory-fraction", "nan")]:
        cli(f"serve {flag} {v or 'empty'}", serve + [flag, v, "--port", "0"], "error", [flag],
            group="cli-serve", timeout=15, serving=True)
    cli("serve --host unresolvable", serve + ["--host", "no-such-host.invalid", "--port", "0"],
        "error", ["no-such-host.invalid"], group="cli-serve", timeout=60)
    cli("serve --host empty", serve + ["--host", "", "--port", "0"], "error", ["host"],
        group="cli-serve", timeout=60)


# ---------------------------------------------------------------- files


def write(name, data):
    path = os.path.join(WORK, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return path


def model_copy(name):
    """A copy of the dense_d64 fixture folder (config.json, model.safetensors)."""
    d = os.path.join(WORK, "models", name)
    shutil.copytree(FIXTURE, d)
    return d


def logits(case, model_dir, expect, needles=(), ids="ids.json", out="out.safetensors"):
    cli(case, ["logits", "--model", model_dir, "--ids", ids, "--out", out], expect, needles,
        group="files-model")


def safetensors_bytes(header, payload=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + payload


def qualify_cases():
    cli("qualify --date 2024-13-45", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--date", "2024-13-45", "--out", "q-out"], "error", ["--date"], group="cli-qualify")
    cli("qualify --lengths empty", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--lengths", "", "--out", "q-out"], "error", ["--lengths"], group="cli-qualify")
    cli("qualify --lengths 0", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--lengths", "0", "--out", "q-out"], "error", ["--lengths"], group="cli-qualify")
    cli("qualify --out is a file", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--out", "plain.txt"], "error", ["plain.txt"], group="cli-qualify")


def file_cases():
    write("ids.json", json.dumps([1, 2, 3, 4]))
    write("plain.txt", "hello")
    os.mkfifo(os.path.join(WORK, "fifo"))
    os.mkdir(os.path.join(WORK, "adir"))
    os.symlink("loop_b", os.path.join(WORK, "loop_a"))
    os.symlink("loop_a", os.path.join(WORK, "loop_b"))
    os.symlink("/dev/zero", os.path.join(WORK, "zero_link"))

    # --ids
    lg = ["logits", "--synthetic", "tiny-d256", "--out", "o.safetensors", "--ids"]
    for name, needle in [("fifo", "not a regular file"), ("adir", "not a regular file"),
                         ("loop_a", "loop_a"), ("/dev/zero", "not a regular file"),
                         ("zero_link", "not a regular file"), ("missing.json", "missing.json")]:
        cli(f"--ids {name}", lg + [name], "error", ["--ids", needle], group="files-input")
    for name, data, needle in [
        ("ids_empty.json", "", "ids_empty.json"),
        ("ids_obj.json", '{"a": 1}', "ids_obj.json"),
        ("ids_neg.json", "[1, -2]", "ids_neg.json"),
        ("ids_float.json", "[1.5]", "ids_float.json"),
        ("ids_big.json", "[99999999999]", "99999999999"),
        ("ids_oov.json", "[1, 2, 1000000]", "1000000"),
        ("ids_none.json", "[]", "ids_none.json"),
        ("ids_nested.json", "[" * 10000 + "]" * 10000, "ids_nested.json"),
        ("ids_trunc.json", "[1, 2,", "ids_trunc.json"),
        ("ids_bom.json", "\ufeff[1, 2]", "ids_bom.json"),
    ]:
        write(name, data)
        cli(f"--ids {name}", lg + [name], "error", [needle], group="files-input")
    cli("--out is a directory", ["logits", "--synthetic", "tiny-d256", "--ids", "ids.json",
        "--out", "adir"], "error", ["adir"], group="files-output")
    cli("--out is /dev/null", ["logits", "--synthetic", "tiny-d256", "--ids", "ids.json",
        "--out", "/dev/null"], "error", ["/dev/null"], group="files-output")
    cli("--out is the --ids file", ["logits", "--synthetic", "tiny-d256", "--ids", "ids.json",
        "--out", "ids.json"], "error", ["ids.json"], group="files-output")
    cli("--out in a missing folder", ["logits", "--synthetic", "tiny-d256", "--ids", "ids.json",
        "--out", "nope/o.safetensors"], "error", ["nope"], group="files-output")

    # --prompt-file / --prompts
    pg = ["generate", "--synthetic", "tiny-d256", "--max-tokens", "2"]
    for name in ["fifo", "adir", "/dev/zero", "loop_a", "missing.txt"]:
        cli(f"--prompt-file {name}", pg + ["--prompt-file", name], "error",
            ["--prompt-file"], group="files-input")
        cli(f"--prompts {name}", pg + ["--prompts", name], "error", ["--prompts"],
            group="files-input")
    write("bad_utf8.txt", b"ab\xff\xfecd")
    cli("--prompt-file invalid UTF-8", pg + ["--prompt-file", "bad_utf8.txt"], "error",
        ["bad_utf8.txt"], group="files-input")
    write("empty.txt", b"")
    cli("--prompt-file empty", pg + ["--prompt-file", "empty.txt"], "error", ["--prompt-file"],
        group="files-input")
    for name, data, expect, needle in [
        ("p_empty.jsonl", "", "error", "p_empty.jsonl"),
        ("p_blank.jsonl", "\n\n", "error", "p_blank.jsonl"),
        ("p_badline.jsonl", '{"prompt": "a"}\n{oops\n', "error", "line 2"),
        ("p_type.jsonl", '{"prompt": 5}\n', "error", "prompt"),
        ("p_neg.jsonl", '{"prompt": "a", "max_tokens": -1}\n', "error", "max_tokens"),
        ("p_zero.jsonl", '{"prompt": "a", "max_tokens": 0}\n', "error", "max_tokens"),
        ("p_huge.jsonl", '{"prompt": "a", "max_tokens": 1e30}\n', "error", "max_tokens"),
        ("p_unknown.jsonl", '{"prompt": "a", "bogus": 1}\n', "error", "bogus"),
        ("p_ids_oov.jsonl", '{"ids": [1, 9999999]}\n', "error", "9999999"),
        ("p_both.jsonl", '{"prompt": "a", "ids": [1]}\n', "error", "line 1"),
        ("p_ok.jsonl", '{"prompt": "a"}\n\n{"ids": [3, 4], "max_tokens": 1}\n', "ok", ""),
    ]:
        write(name, data)
        cli(f"--prompts {name}", pg + ["--prompts", name], expect, [needle] if needle else [],
            group="files-input")
    # Data loss: an output that is an input, a hard link, a symlink, a device.
    before = open(os.path.join(WORK, "p_ok.jsonl"), "rb").read()
    cli("--json is the --prompts file", pg + ["--prompts", "p_ok.jsonl", "--json", "p_ok.jsonl"],
        "error", ["p_ok.jsonl"], group="files-output")
    os.link(os.path.join(WORK, "p_ok.jsonl"), os.path.join(WORK, "p_hard.jsonl"))
    cli("--json is a hard link to --prompts", pg + ["--prompts", "p_ok.jsonl", "--json",
        "p_hard.jsonl"], "error", ["p_hard.jsonl"], group="files-output")
    os.symlink("p_ok.jsonl", os.path.join(WORK, "p_sym.jsonl"))
    cli("--json is a symlink", pg + ["--prompts", "p_ok.jsonl", "--json", "p_sym.jsonl"],
        "error", ["p_sym.jsonl"], group="files-output")
    cli("--json is a FIFO", pg + ["--prompts", "p_ok.jsonl", "--json", "fifo"], "error",
        ["fifo"], group="files-output")
    after = open(os.path.join(WORK, "p_ok.jsonl"), "rb").read()
    record("--prompts file intact after the --json cases", "files-output", "intact",
           "intact" if before == after else "changed", before == after, "")
    cli("doctor --json /dev/null", ["doctor", "--synthetic", "tiny-d256", "--json", "/dev/null"],
        "error", ["/dev/null"], group="files-output")
    cli("bench validate FIFO", ["bench", "validate", "fifo"], "error", ["fifo"],
        group="files-input")
    cli("bench validate empty", ["bench", "validate", "empty.txt"], "error", ["empty.txt"],
        group="files-input")
    write("deep.json", "[" * 100000 + "]" * 100000)
    cli("bench validate nested 1e5 deep", ["bench", "validate", "deep.json"], "error",
        ["deep.json"], group="files-input")
    write("schema_only.json", '{"schema": "headroom.bench.prefill/1"}')
    cli("bench validate schema only", ["bench", "validate", "schema_only.json"], "error",
        ["schema_only.json"], group="files-input")
    cli("--qualifications is a file", BASE_GEN + ["--qualifications", "plain.txt"], "warn",
        ["plain.txt"], group="files-input")
    cli("--qualifications is a FIFO", BASE_GEN + ["--qualifications", "fifo"], "warn",
        ["fifo"], group="files-input")
    os.mkdir(os.path.join(WORK, "qual_bad"))
    write("qual_bad/x.toml", 'id = 5\n[hardware\n')
    cli("--qualifications with a broken entry", BASE_GEN + ["--qualifications", "qual_bad"],
        "warn", ["x.toml"], group="files-input")

    # Checkpoint folders (dense_d64 fixture copies), through `logits --model`.
    logits("fixture as is", FIXTURE, "ok")
    d = model_copy("no_config")
    os.remove(os.path.join(d, "config.json"))
    logits("config.json missing", d, "error", ["config.json"])
    for name, mutate, needle in [
        ("hidden_size string", lambda c: c.update(hidden_size="64"), "hidden_size"),
        ("hidden_size negative", lambda c: c.update(hidden_size=-64), "hidden_size"),
        ("hidden_size 2^40", lambda c: c.update(hidden_size=2 ** 40), "hidden_size"),
        ("vocab_size 1e12", lambda c: c.update(vocab_size=10 ** 12), "vocab_size"),
        ("vocab_size 0", lambda c: c.update(vocab_size=0), "vocab_size"),
        ("layers 1e9", lambda c: c.update(num_hidden_layers=10 ** 9), "layer"),
        ("heads 0", lambda c: c.update(num_attention_heads=0), "num_attention_heads"),
        ("head_dim null", lambda c: c.update(head_dim=None), "head_dim"),
        ("rms_norm_eps string", lambda c: c.update(rms_norm_eps="x"), "rms_norm_eps"),
        ("rope_theta negative", lambda c: c["rope_parameters"].update(rope_theta=-1.0), "rope"),
        ("rope_parameters a string", lambda c: c.update(rope_parameters="x"), "rope"),
        ("layer_types wrong length", lambda c: c.update(layer_types=["full_attention"]),
         "layer_types"),
        ("layer_types unknown kind", lambda c: c.update(
            layer_types=["warp_attention"] * len(c.get("layer_types", [0]))), "warp_attention"),
        ("max_position_embeddings 0", lambda c: c.update(max_position_embeddings=0),
         "max_position_embeddings"),
        ("intermediate_size -1", lambda c: c.update(intermediate_size=-1), "intermediate_size"),
        ("array instead of object", None, "config"),
    ]:
        d = model_copy("cfg_" + name.replace(" ", "_").replace("^", ""))
        p = os.path.join(d, "config.json")
        if mutate is None:
            open(p, "w").write("[1, 2]")
        else:
            c = json.load(open(p))
            mutate(c)
            open(p, "w").write(json.dumps(c))
        logits(f"config.json {name}", d, "error", [needle])
    d = model_copy("cfg_fifo")
    os.remove(os.path.join(d, "config.json"))
    os.mkfifo(os.path.join(d, "config.json"))
    logits("config.json FIFO", d, "error", ["config.json"])
    d = model_copy("cfg_dir")
    os.remove(os.path.join(d, "config.json"))
    os.mkdir(os.path.join(d, "config.json"))
    logits("config.json directory", d, "error", ["config.json"])
    d = model_copy("cfg_loop")
    os.remove(os.path.join(d, "config.json"))
    os.symlink("config.json", os.path.join(d, "config.json"))
    logits("config.json symlink loop", d, "error", ["config.json"])

    st = "model.safetensors"
    real = open(os.path.join(FIXTURE, st), "rb").read()
    (hlen,) = struct.unpack("<Q", real[:8])
    header = json.loads(real[8:8 + hlen])
    cases = [
        ("empty", b"", st),
        ("7 bytes", b"\x01\x02\x03\x04\x05\x06\x07", st),
        ("truncated payload", real[: len(real) // 2], st),
        ("truncated header", real[: 8 + hlen // 2], st),
        ("header length 2^63", struct.pack("<Q", 2 ** 63) + real[8:], st),
        ("header length 2^64-1", struct.pack("<Q", 2 ** 64 - 1) + real[8:], st),
        ("header length past the end", struct.pack("<Q", len(real)) + real[8:], st),
        ("header not JSON", struct.pack("<Q", 5) + b"{{{{{" + real[8 + hlen:], st),
        ("header a JSON array", safetensors_bytes([1, 2]), st),
        ("header nested 1e5 deep", struct.pack("<Q", 200000) + b"[" * 100000 + b"]" * 100000, st),
    ]
    bad_offsets = json.loads(json.dumps(header))
    name0 = next(k for k in bad_offsets if k != "__metadata__")
    bad_offsets[name0]["data_offsets"] = [0, 2 ** 62]
    cases.append(("offsets past the end", safetensors_bytes(bad_offsets, real[8 + hlen:]), st))
    inverted = json.loads(json.dumps(header))
    a, b = inverted[name0]["data_offsets"]
    inverted[name0]["data_offsets"] = [b, a] if b > a else [a + 4, a]
    cases.append(("inverted offsets", safetensors_bytes(inverted, real[8 + hlen:]), st))
    wrong_dtype = json.loads(json.dumps(header))
    wrong_dtype[name0]["dtype"] = "Q13"
    cases.append(("unknown dtype", safetensors_bytes(wrong_dtype, real[8 + hlen:]), "Q13"))
    wrong_shape = json.loads(json.dumps(header))
    wrong_shape[name0]["shape"] = [3, 3]
    cases.append(("shape disagrees with bytes", safetensors_bytes(wrong_shape, real[8 + hlen:]),
                  st))
    huge_shape = json.loads(json.dumps(header))
    huge_shape[name0]["shape"] = [2 ** 40, 2 ** 40]
    cases.append(("shape overflowing usize", safetensors_bytes(huge_shape, real[8 + hlen:]),
                  st))
    missing = json.loads(json.dumps(header))
    del missing[name0]
    cases.append(("a tensor missing", safetensors_bytes(missing, real[8 + hlen:]), st))
    for name, data, needle in cases:
        d = model_copy("st_" + "".join(ch if ch.isalnum() else "_" for ch in name))
        open(os.path.join(d, st), "wb").write(data)
        logits(f"model.safetensors {name}", d, "error", [needle])
    for kind in ["fifo", "dir", "zero", "loop"]:
        d = model_copy("st_special_" + kind)
        p = os.path.join(d, st)
        os.remove(p)
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "dir":
            os.mkdir(p)
        elif kind == "zero":
            os.symlink("/dev/zero", p)
        else:
            os.symlink(st, p)
        logits(f"model.safetensors {kind}", d, "error", [st])
    # tokenizer.json (generate --model needs one for text).
    for name, data, needle in [
        ("not JSON", "{oops", "tokenizer.json"),
        ("empty object", "{}", "tokenizer.json"),
        ("model wrong type", '{"model": 5}', "tokenizer.json"),
        ("vocab huge ids", json.dumps({"model": {"type": "BPE", "vocab": {"a": 2 ** 40},
                                                  "merges": []}}), "tokenizer.json"),
    ]:
        d = model_copy("tok_" + "".join(ch if ch.isalnum() else "_" for ch in name))
        open(os.path.join(d, "tokenizer.json"), "w").write(data)
        cli(f"tokenizer.json {name}", ["generate", "--model", d, "--prompt", "x",
            "--max-tokens", "1"], "error", [needle], group="files-model")
    d = model_copy("tok_fifo")
    os.mkfifo(os.path.join(d, "tokenizer.json"))
    cli("tokenizer.json FIFO", ["generate", "--model", d, "--prompt", "x", "--max-tokens", "1"],
        "error", ["tokenizer.json"], group="files-model")


# ---------------------------------------------------------------- server


def http_raw(port, data, timeout=HTTP_TIMEOUT, read_all=False, send_parts=None):
    """Sends raw bytes, reads one response: (status, headers, body) or raises."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if send_parts:
            for part, pause in send_parts:
                s.sendall(part)
                time.sleep(pause)
        else:
            s.sendall(data)
        buf = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            buf += chunk
            if not read_all and complete(buf):
                break
        return buf
    finally:
        s.close()


def complete(buf):
    """Whether `buf` holds one whole response."""
    while buf.startswith(b"HTTP/1.1 1"):
        buf = buf.partition(b"\r\n\r\n")[2]
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return False
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    if "content-length" in headers:
        return len(body) >= int(headers["content-length"])
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return body.endswith(b"0\r\n\r\n")
    return False


def parse(buf):
    while buf.startswith(b"HTTP/1.1 1"):  # interim answers (100 Continue)
        buf = buf.partition(b"\r\n\r\n")[2]
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            try:
                n = int(size_line.split(b";")[0], 16)
            except ValueError:
                break
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    return status, headers, body


def request(method, path, body=b"", headers=None, version="HTTP/1.1"):
    hs = {"Host": "localhost", "Connection": "close"}
    if body:
        hs["Content-Type"] = "application/json"
        hs["Content-Length"] = str(len(body))
    hs.update(headers or {})
    head = f"{method} {path} {version}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in hs.items() if v is not None) + "\r\n"
    return head.encode() + body


def classify_http(status, body):
    if status == 0:
        return "no answer"
    if status >= 500:
        return str(status)
    if 400 <= status < 500:
        return "4xx"
    if 200 <= status < 300:
        return "2xx"
    return str(status)


def server_case(case, raw, expect, needle=None, group="server", protocol=False, **kw):
    """Sends `raw` and checks the answer's class (`protocol`: an HTTP-level
    refusal, which may carry no OpenAI error body; class `closed`: the
    connection is closed without an answer, as for a foreign protocol)."""
    if ARGS.only and ARGS.only not in case:
        return
    try:
        buf = http_raw(SERVER.port, raw, **kw)
    except OSError as e:
        record(case, group, expect, "no answer", False, str(e))
        return
    status, headers, body = parse(buf)
    got = classify_http(status, body)
    if got == "no answer" and expect == "closed":
        got = "closed"
    text = body.decode("utf-8", "replace")
    ok = got == expect
    detail = f"{status} {text[:200]}"
    if got == "4xx" and not (protocol and not body):
        try:
            err = json.loads(body)["error"]
            msg = (err.get("message") or "") + " " + str(err.get("param") or "")
        except (ValueError, KeyError, TypeError):
            ok = False
            msg = ""
            detail = f"{status} not an OpenAI error object: {text[:200]}"
        if ok and needle and needle.lower() not in msg.lower():
            ok = False
            detail = f"{status} does not name {needle!r}: {text[:200]}"
        for leak in ["untagged enum", "Option<", "serde", "did not match any variant"]:
            if leak in text:
                ok = False
                detail = f"{status} leaks a Rust type name: {text[:200]}"
    if got == "2xx" and headers.get("content-type", "").startswith("text/event-stream"):
        if b"[DONE]" not in body:
            ok = False
            detail = f"stream without [DONE]: {text[-200:]}"
    if ok and not SERVER.healthy():
        ok = False
        detail = "/health stopped answering 200 after this case"
    record(case, group, expect, got, ok, detail)


def post(case, path, obj, expect, needle=None, raw_body=None, headers=None, **kw):
    body = raw_body if raw_body is not None else json.dumps(obj).encode()
    server_case(case, request("POST", path, body, headers), expect, needle, **kw)


class Server:
    def __init__(self, port):
        self.port = port
        self.log = open(os.path.join(WORK, "serve.log"), "wb")
        self.proc = subprocess.Popen(
            [ARGS.bin, "serve", "--synthetic", "tiny-d256", "--port", str(port),
             "--max-context", str(SERVE_CONTEXT), "--max-body-bytes", "65536",
             "--header-timeout-s", "3", "--body-timeout-s", "3", "--max-running", "4"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=WORK,
            env=dict(os.environ, HEADROOM_BUILTIN_QUALIFICATIONS="off"))
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited {self.proc.returncode}: see {self.log.name}")
            if self.healthy():
                return
            time.sleep(0.3)
        raise SystemExit("serve did not answer /health in 120 s")

    def healthy(self):
        try:
            buf = http_raw(self.port, request("GET", "/health"), timeout=10)
            return parse(buf)[0] == 200
        except OSError:
            return False

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            record("serve stops on SIGTERM", "server", "exit", "hang", False, "")
            return
        self.log.close()
        log = open(self.log.name, "rb").read().decode("utf-8", "replace")
        record("serve exits 0 on SIGTERM", "server", "0", str(self.proc.returncode),
               self.proc.returncode == 0, "")
        record("no panic in the server's log", "server", "none",
               "panic" if "panicked" in log else "none", "panicked" not in log,
               log[log.find("panicked") - 200:][:400] if "panicked" in log else "")


CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def chat(**extra):
    b = {"model": "tiny-d256", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    b.update(extra)
    return b


def comp(**extra):
    b = {"model": "tiny-d256", "prompt": "hi", "max_tokens": 2}
    b.update(extra)
    return b


def server_field_cases():
    deep = 10000
    nested = "[" * deep + "]" * deep
    fields = {
        # field: (good-type example, [bad values], whether null means "default")
        "max_tokens": ([1.5, "5", -1, 0, 2 ** 64, 1e300, True, [2], {"a": 1}], True),
        "temperature": (["0.5", -0.1, 100.5, 1e300, [1], {"a": 1}, True], True),
        "top_p": (["1", -0.5, 0, 1.01, [1], True], True),
        "n": (["2", 0, -1, 1000, 1.5, 2 ** 64], True),
        "stop": ([5, [5], ["a"] * 100, {"a": 1}, [""] * 2, [["x"]]], True),
        "seed": (["7", 1.5, 2 ** 64, [1]], True),
        "presence_penalty": (["1", 3, -3, 1e300, [1]], True),
        "frequency_penalty": (["1", 2.5, -2.5, {"x": 1}], True),
        "stream": (["yes", 1, [True], {"a": 1}], True),
        "logprobs": (["yes", 1, [True]], True),
        "top_logprobs": (["3", -1, 21, 2 ** 64, 1.5], True),
        "user": ([5, [1], {"a": 1}], True),
        "model": ([5, [1], {"a": 1}], True),
    }
    for field, (bads, _) in fields.items():
        for i, v in enumerate(bads):
            post(f"chat {field}={json.dumps(v)[:30]}", CHAT, chat(**{field: v}), "4xx", field,
                 group="server-fields")
        post(f"chat {field}=null", CHAT, chat(**{field: None}), "2xx", group="server-fields")
    post("chat temperature=2.5 (range is [0, 100])", CHAT, chat(temperature=2.5), "2xx",
         group="server-fields")
    post("chat seed=-1 (any i64)", CHAT, chat(seed=-1), "2xx", group="server-fields")
    # Ones with no-valid-meaning values in completions.
    for field, v in [("prompt", 5), ("prompt", None), ("prompt", {"a": 1}), ("prompt", [[1.5]]),
                     ("prompt", [-1]), ("prompt", [2 ** 40]), ("prompt", [[1], "a"]),
                     ("prompt", []), ("prompt", ""), ("echo", "yes"), ("logprobs", 6),
                     ("logprobs", -1), ("best_of", 3), ("suffix", "x"), ("logit_bias", {"1": 5}),
                     ("max_tokens", -5), ("n", 9)]:
        post(f"completion {field}={json.dumps(v)[:30]}", COMP, comp(**{field: v}), "4xx", field,
             group="server-fields")
    for field, v in [("messages", None), ("messages", []), ("messages", "hi"),
                     ("messages", [{"role": "wizard", "content": "x"}]),
                     ("messages", [{"role": "user"}]),
                     ("messages", [{"role": "user", "content": 5}]),
                     ("messages", [{"role": "user", "content": [{"type": "image_url",
                                                                   "image_url": {"url": "x"}}]}]),
                     ("messages", [{"role": "user", "content": [{"type": "text"}]}]),
                     ("messages", [{"role": "tool", "content": "x"}] * 0 + [5]),
                     ("tools", [{"type": "function"}]), ("tools", "x"),
                     ("tool_choice", "sometimes"), ("tool_choice", {"type": "function"}),
                     ("tool_choice", {"type": "function", "function": {"name": "nope"}}),
                     ("response_format", {"type": "json_schema"}),
                     ("stream_options", {"include_usage": "yes"}),
                     ("stream_options", 5), ("functions", [{"name": "f"}]),
                     ("max_completion_tokens", -3), ("logit_bias", {"x": 1})]:
        post(f"chat {field}={json.dumps(v)[:40]}", CHAT, chat(**{field: v}), "4xx", field,
             group="server-fields")
    # Nesting and unknown fields.
    post("chat messages nested 10000 deep", CHAT, None, "4xx", None,
         raw_body=('{"messages": ' + nested + "}").encode(), group="server-fields")
    post("chat stop nested 10000 deep", CHAT, None, "4xx", None,
         raw_body=('{"messages": [{"role": "user", "content": "x"}], "stop": ' + nested +
                   "}").encode(), group="server-fields")
    post("chat content object nested 200 deep", CHAT, None, "4xx", None,
         raw_body=('{"messages": [{"role": "user", "content": ' + '{"a":' * 200 + "1" +
                   "}" * 200 + "}]}").encode(), group="server-fields")
    # Documented: fields that do not change the answer and unknown fields are
    # ignored (crates/server/src/unsupported.rs, docs/server.md).
    post("chat unknown field (ignored)", CHAT, chat(frobnicate=1), "2xx", group="server-fields")
    post("completion unknown field (ignored)", COMP, comp(frobnicate={"x": [1]}), "2xx",
         group="server-fields")
    post("chat metadata (ignored)", CHAT, chat(metadata={"a": "b"}), "2xx",
         group="server-fields")


def server_protocol_cases():
    good = json.dumps(comp()).encode()
    post("completion ok", COMP, comp(), "2xx", group="server-http")
    post("chat ok", CHAT, chat(), "2xx", group="server-http")
    post("chat stream ok", CHAT, chat(stream=True, stream_options={"include_usage": True}),
         "2xx", group="server-http")
    post("bad UTF-8 in a string", COMP, None, "4xx", None,
         raw_body=b'{"prompt": "a\xff\xfeb", "max_tokens": 2}', group="server-http")
    post("bad UTF-8 in a key", COMP, None, "4xx", None,
         raw_body=b'{"pr\xffompt": "a", "max_tokens": 2}', group="server-http")
    post("lone surrogate escape (not valid JSON text)", COMP, None, "4xx", None,
         raw_body=b'{"prompt": "a\\ud800b", "max_tokens": 2}', group="server-http")
    post("NUL in the prompt", COMP, comp(prompt="a\u0000b"), "2xx", group="server-http")
    post("duplicate key (last wins, as JSON.parse)", COMP, None, "2xx", None,
         raw_body=b'{"prompt": "a", "max_tokens": 2, "max_tokens": 3}', group="server-http")
    post("duplicate key with a bad first value (last wins)", COMP, None, "2xx", None,
         raw_body=b'{"prompt": "a", "max_tokens": -2, "max_tokens": 3}', group="server-http")
    post("trailing garbage", COMP, None, "4xx", None,
         raw_body=good + b" xyz", group="server-http")
    post("two JSON documents", COMP, None, "4xx", None, raw_body=good + good,
         group="server-http")
    post("empty body", COMP, None, "4xx", None, raw_body=b"", group="server-http",
         headers={"Content-Length": "0"})
    post("body a JSON array", COMP, None, "4xx", None, raw_body=b"[1]", group="server-http")
    post("body JSON null", COMP, None, "4xx", None, raw_body=b"null", group="server-http")
    post("number 1e999", COMP, None, "4xx", None,
         raw_body=b'{"prompt": "a", "max_tokens": 1e999}', group="server-http")
    # Documented: the body is read as JSON whatever Content-Type says (curl -d sends
    # application/x-www-form-urlencoded).
    post("text/plain content-type", COMP, comp(), "2xx",
         headers={"Content-Type": "text/plain"}, group="server-http")
    post("no content-type", COMP, comp(), "2xx", headers={"Content-Type": None},
         group="server-http")
    post("form content-type with a non-JSON body", COMP, None, "4xx", None,
         raw_body=b"prompt=hi&max_tokens=2",
         headers={"Content-Type": "application/x-www-form-urlencoded"}, group="server-http")
    post("content-type with charset", COMP, comp(), "2xx",
         headers={"Content-Type": "application/json; charset=utf-8"}, group="server-http")
    post("oversize body (declared)", COMP, None, "4xx", None,
         raw_body=json.dumps(comp(prompt="a" * 70000)).encode(), group="server-http")
    big = json.dumps(comp(prompt="a" * 70000)).encode()
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 4096]), big[i:i + 4096])
                       for i in range(0, len(big), 4096)) + b"0\r\n\r\n"
    server_case("oversize body (chunked)", request("POST", COMP, b"", {
        "Content-Type": "application/json", "Transfer-Encoding": "chunked"}) + chunked,
        "4xx", None, group="server-http")
    small = b"".join(b"%x\r\n%s\r\n" % (len(good[i:i + 7]), good[i:i + 7])
                     for i in range(0, len(good), 7)) + b"0\r\n\r\n"
    server_case("chunked body", request("POST", COMP, b"", {
        "Content-Type": "application/json", "Transfer-Encoding": "chunked"}) + small,
        "2xx", group="server-http")
    server_case("chunked with a bad size line", request("POST", COMP, b"", {
        "Content-Type": "application/json", "Transfer-Encoding": "chunked"}) + b"zz\r\nab\r\n",
        "4xx", None, group="server-http", protocol=True)
    server_case("content-length larger than the body", request("POST", COMP, good[:10], {
        "Content-Length": str(len(good))}), "4xx", None, group="server-http", protocol=True)
    server_case("negative content-length", request("POST", COMP, good, {
        "Content-Length": "-5"}), "4xx", None, group="server-http", protocol=True)
    server_case("two content-lengths", request("POST", COMP, good, {
        "Content-Length": f"{len(good)}\r\nContent-Length: {len(good) + 1}"}), "4xx", None,
        group="server-http", protocol=True)
    server_case("HTTP/1.0", request("POST", COMP, good, {"Connection": None},
                                    version="HTTP/1.0"), "2xx", group="server-http")
    server_case("HTTP/2 prior-knowledge preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "closed",
                None, group="server-http")
    server_case("garbage request line", b"\x00\x01\x02 / HTTP/1.1\r\n\r\n", "4xx", None,
                group="server-http", protocol=True)
    server_case("GET on a POST route", request("GET", COMP), "4xx", None, group="server-http")
    server_case("unknown route", request("POST", "/v1/nope", good), "4xx", None,
                group="server-http")
    server_case("path with a NUL escape", request("GET", "/health%00x"), "4xx", None,
                group="server-http", protocol=True)
    server_case("header of 100 KB", request("POST", COMP, good, {"X-Big": "a" * 100_000}),
                "2xx", None, group="server-http")
    server_case("header of 1 MB", request("POST", COMP, good, {"X-Big": "a" * 1_000_000}),
                "4xx", None, group="server-http", protocol=True)
    server_case("Expect: 100-continue", request("POST", COMP, good, {
        "Expect": "100-continue"}), "2xx", group="server-http")
    server_case("Authorization without a key configured", request("POST", COMP, good, {
        "Authorization": "Bearer x"}), "2xx", group="server-http")
    # Pipelining: two requests in one write, both answered in order.
    two = request("POST", COMP, good, {"Connection": "keep-alive"}) + request("GET", "/health")
    if not ARGS.only or ARGS.only in "pipelined":
        try:
            buf = http_raw(SERVER.port, two, read_all=True, timeout=30)
            n = buf.count(b"HTTP/1.1 200")
            record("pipelined POST + GET", "server-http", "2 answers", f"{n} answers", n == 2,
                   buf[:120].decode("latin-1"))
        except OSError as e:
            record("pipelined POST + GET", "server-http", "2 answers", "no answer", False, str(e))
    # Concurrent cancel: streams dropped mid-way, then a normal request.
    if not ARGS.only or ARGS.only in "concurrent cancel":
        def cancel_one():
            try:
                s = socket.create_connection(("127.0.0.1", SERVER.port), timeout=10)
                body = json.dumps(comp(max_tokens=200, stream=True)).encode()
                s.sendall(request("POST", COMP, body))
                s.recv(100)
                s.close()
            except OSError:
                pass
        threads = [threading.Thread(target=cancel_one) for _ in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        post("a request after 12 cancelled streams", COMP, comp(), "2xx", group="server-http")


def context_cases():
    # The byte codec: one token per byte; --max-context 512.
    post("prompt + max_tokens == limit", COMP, comp(prompt="a" * 500, max_tokens=12), "2xx",
         group="context")
    post("prompt + max_tokens == limit + 1", COMP, comp(prompt="a" * 500, max_tokens=13), "4xx",
         "context", group="context")
    post("prompt == limit, max_tokens 1", COMP, comp(prompt="a" * 512, max_tokens=1), "4xx",
         "context", group="context")
    post("prompt == limit - 1, max_tokens 1", COMP, comp(prompt="a" * 511, max_tokens=1), "2xx",
         group="context")
    post("max_tokens 2^63 (overflow)", COMP, comp(max_tokens=2 ** 63), "4xx", "max_tokens",
         group="context")
    post("max_tokens 2^64-1", COMP, comp(max_tokens=2 ** 64 - 1), "4xx", "max_tokens",
         group="context")
    post("max_tokens 2^32 + 1", COMP, comp(max_tokens=2 ** 32 + 1), "4xx", "context",
         group="context")
    post("no max_tokens, long prompt (default clipped?)", COMP,
         {"prompt": "a" * 400}, "2xx", group="context")
    post("ids prompt of 600", COMP, comp(prompt=[1] * 600), "4xx", "context", group="context")
    post("n 8 at the limit", COMP, comp(prompt="a" * 500, max_tokens=12, n=8), "2xx",
         group="context")
    post("chat at limit + 1", CHAT, chat(messages=[{"role": "user", "content": "a" * 600}]),
         "4xx", "context", group="context")


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
    global ARGS, WORK, SERVER
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "headroom"))
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--port", type=int, default=0)
    ARGS = ap.parse_args()
    ARGS.bin = os.path.abspath(ARGS.bin)
    if not os.access(ARGS.bin, os.X_OK):
        raise SystemExit(f"no headroom binary at {ARGS.bin}: cargo build --release -p headroom")
    WORK = tempfile.mkdtemp(prefix="headroom-probe-")
    start = time.time()
    try:
        cli_flag_cases()
        file_cases()
        qualify_cases()
        port = ARGS.port or free_port()
        SERVER = Server(port)
        try:
            server_field_cases()
            server_protocol_cases()
            context_cases()
        finally:
            SERVER.stop()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    fails = summary()
    print(f"took {time.time() - start:.0f} s")
    if ARGS.json:
        with open(ARGS.json, "w") as f:
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
