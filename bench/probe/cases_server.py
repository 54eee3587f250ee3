"""The server cases: every request field with bad types and values, the
HTTP protocol's edge cases, and the context limit's boundaries."""

import json
import socket
import threading

from harness import S, record
from http_probe import CHAT, COMP, chat, comp, http_raw, post, request, server_case


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
    if not S.args.only or S.args.only in "pipelined":
        try:
            buf = http_raw(S.server.port, two, read_all=True, timeout=30)
            n = buf.count(b"HTTP/1.1 200")
            record("pipelined POST + GET", "server-http", "2 answers", f"{n} answers", n == 2,
                   buf[:120].decode("latin-1"))
        except OSError as e:
            record("pipelined POST + GET", "server-http", "2 answers", "no answer", False, str(e))
    # Concurrent cancel: streams dropped mid-way, then a normal request.
    if not S.args.only or S.args.only in "concurrent cancel":
        def cancel_one():
            try:
                s = socket.create_connection(("127.0.0.1", S.server.port), timeout=10)
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
