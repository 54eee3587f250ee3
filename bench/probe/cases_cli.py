"""The command-line cases: every numeric and enumerated flag of `generate`
and `serve` with bad values, and `qualify`'s inputs."""

from harness import BASE_GEN, FIXTURE, cli, gen


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


def qualify_cases():
    cli("qualify --date 2024-13-45", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--date", "2024-13-45", "--out", "q-out"], "error", ["--date"], group="cli-qualify")
    cli("qualify --lengths empty", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--lengths", "", "--out", "q-out"], "error", ["--lengths"], group="cli-qualify")
    cli("qualify --lengths 0", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--lengths", "0", "--out", "q-out"], "error", ["--lengths"], group="cli-qualify")
    cli("qualify --out is a file", ["qualify", "--backend", "cpu", "--synthetic", "tiny-d256",
        "--out", "plain.txt"], "error", ["plain.txt"], group="cli-qualify")
