#!/usr/bin/env python3
"""The official `openai` Python client against `headroom serve`, without adaptation.

Usage: bench/openai_client_check.py [--binary target/release/headroom] [--url http://127.0.0.1:PORT]

Without --url it starts `headroom serve --synthetic tiny-d256 --port 0` itself (loopback only),
runs chat, completions, streaming of both (with include_usage), models.list and an error, then
sends SIGTERM and checks the server exits 0. Exits 0 when every check passes; exits 0 with a
SKIP line when the `openai` package is not installed (CI may lack it).
"""
import argparse
import os
import signal
import subprocess
import sys

try:
    import openai
except ImportError:
    print("SKIP: the openai package is not installed (pip install openai)")
    sys.exit(0)


def start(binary):
    p = subprocess.Popen(
        [binary, "serve", "--synthetic", "tiny-d256", "--port", "0", "--max-context", "1024"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on http://"):
        p.kill()
        sys.exit(f"unexpected first line: {line!r}")
    return p, line.split()[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="target/release/headroom")
    ap.add_argument("--url")
    a = ap.parse_args()
    proc = None
    url = a.url
    if url is None:
        proc, url = start(a.binary)
    host = url.split("//", 1)[1].split(":", 1)[0]
    if host not in ("127.0.0.1", "localhost", "[::1]"):
        sys.exit("only servers on this machine (loopback)")
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=120, max_retries=0)
    checks = 0
    try:
        models = client.models.list()
        model = models.data[0].id
        checks += 1

        chat = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0)
        assert chat.choices[0].message.role == "assistant"
        assert chat.usage.completion_tokens >= 1 and chat.usage.prompt_tokens > 0
        assert chat.choices[0].finish_reason in ("stop", "length")
        checks += 1

        comp = client.completions.create(model=model, prompt="Once upon", max_tokens=8, temperature=0)
        assert comp.usage.prompt_tokens == len("Once upon".encode())
        checks += 1

        text = ""
        usage = None
        for chunk in client.completions.create(model=model, prompt="Once upon", max_tokens=8, temperature=0,
                                               stream=True, stream_options={"include_usage": True}):
            if chunk.choices:
                text += chunk.choices[0].text
            if chunk.usage:
                usage = chunk.usage
        assert text == comp.choices[0].text, (text, comp.choices[0].text)
        assert usage is not None and usage.completion_tokens == comp.usage.completion_tokens
        checks += 1

        streamed = ""
        for chunk in client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0,
                stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                streamed += chunk.choices[0].delta.content
        assert streamed == chat.choices[0].message.content, (streamed, chat.choices[0].message.content)
        checks += 1

        try:
            client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
            raise AssertionError("an unknown model was accepted")
        except openai.NotFoundError as e:
            assert "no-such-model" in str(e)
        try:
            client.completions.create(model=model, prompt="x", max_tokens=2, n=2)
            raise AssertionError("n=2 was accepted")
        except openai.BadRequestError:
            pass
        checks += 1
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
            if rc != 0:
                sys.exit(f"the server exited {rc} after SIGTERM")
    print(f"openai client {openai.__version__}: {checks} passed, 0 failed")


if __name__ == "__main__":
    main()
