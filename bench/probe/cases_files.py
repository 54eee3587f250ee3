"""The file cases: inputs and outputs that are missing, FIFOs, folders,
loops or devices, and checkpoint folders broken one file at a time (copies
of the dense_d64 fixture)."""

import json
import os
import shutil
import struct

from harness import BASE_GEN, FIXTURE, S, cli, record


def write(name, data):
    path = os.path.join(S.work, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return path


def model_copy(name):
    """A copy of the dense_d64 fixture folder (config.json, model.safetensors)."""
    d = os.path.join(S.work, "models", name)
    shutil.copytree(FIXTURE, d)
    return d


def logits(case, model_dir, expect, needles=(), ids="ids.json", out="out.safetensors"):
    cli(case, ["logits", "--model", model_dir, "--ids", ids, "--out", out], expect, needles,
        group="files-model")


def safetensors_bytes(header, payload=b""):
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + payload


def file_cases():
    write("ids.json", json.dumps([1, 2, 3, 4]))
    write("plain.txt", "hello")
    os.mkfifo(os.path.join(S.work, "fifo"))
    os.mkdir(os.path.join(S.work, "adir"))
    os.symlink("loop_b", os.path.join(S.work, "loop_a"))
    os.symlink("loop_a", os.path.join(S.work, "loop_b"))
    os.symlink("/dev/zero", os.path.join(S.work, "zero_link"))

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
    before = open(os.path.join(S.work, "p_ok.jsonl"), "rb").read()
    cli("--json is the --prompts file", pg + ["--prompts", "p_ok.jsonl", "--json", "p_ok.jsonl"],
        "error", ["p_ok.jsonl"], group="files-output")
    os.link(os.path.join(S.work, "p_ok.jsonl"), os.path.join(S.work, "p_hard.jsonl"))
    cli("--json is a hard link to --prompts", pg + ["--prompts", "p_ok.jsonl", "--json",
        "p_hard.jsonl"], "error", ["p_hard.jsonl"], group="files-output")
    os.symlink("p_ok.jsonl", os.path.join(S.work, "p_sym.jsonl"))
    cli("--json is a symlink", pg + ["--prompts", "p_ok.jsonl", "--json", "p_sym.jsonl"],
        "error", ["p_sym.jsonl"], group="files-output")
    cli("--json is a FIFO", pg + ["--prompts", "p_ok.jsonl", "--json", "fifo"], "error",
        ["fifo"], group="files-output")
    after = open(os.path.join(S.work, "p_ok.jsonl"), "rb").read()
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
    os.mkdir(os.path.join(S.work, "qual_bad"))
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
