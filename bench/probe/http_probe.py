"""The HTTP side of the probe: raw requests over a socket and their
parsing, `server_case` (one request and its class), and `Server`, the
`headroom serve` under test."""

import json
import os
import signal
import socket
import subprocess
import time

from harness import HTTP_TIMEOUT, SERVE_CONTEXT, S, record


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
    if S.args.only and S.args.only not in case:
        return
    try:
        buf = http_raw(S.server.port, raw, **kw)
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
    if ok and not S.server.healthy():
        ok = False
        detail = "/health stopped answering 200 after this case"
    record(case, group, expect, got, ok, detail)


def post(case, path, obj, expect, needle=None, raw_body=None, headers=None, **kw):
    body = raw_body if raw_body is not None else json.dumps(obj).encode()
    server_case(case, request("POST", path, body, headers), expect, needle, **kw)


class Server:
    def __init__(self, port):
        self.port = port
        self.log = open(os.path.join(S.work, "serve.log"), "wb")
        self.proc = subprocess.Popen(
            [S.args.bin, "serve", "--synthetic", "tiny-d256", "--port", str(port),
             "--max-context", str(SERVE_CONTEXT), "--max-body-bytes", "65536",
             "--header-timeout-s", "3", "--body-timeout-s", "3", "--max-running", "4"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=S.work,
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
