"""Exercises a Headroom server with the official `openai` Python client: tools
(non-streaming and streaming, parallel calls, a tool result sent back),
reasoning, `tool_choice: none` and `chat_template_kwargs`.

    python3 check_client.py --base-url http://127.0.0.1:PORT/v1 [--model NAME] [--any-output]

By default the server must answer every request with the scripted output of
crates/server/tests/openai_client.rs (reasoning, then a get_weather and an add
call). With --any-output (a real model) only the shapes are checked: every
request succeeds and whatever tool calls come back parse. Exits non-zero,
naming the failed check, on any mismatch.
"""

import argparse
import json
import sys

import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds a number to each element",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "number"}, "b": {"type": "array"}}}}},
]
USER = [{"role": "user", "content": "Weather in Paris for 3 days? And 1.5 + [2, 3]?"}]
EXPECTED = [("get_weather", {"city": "Paris", "days": 3}), ("add", {"a": 1.5, "b": [2, 3]})]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def extra(obj, key):
    return (obj.model_extra or {}).get(key)


def calls_of(tool_calls):
    out = []
    for tc in tool_calls or []:
        check(tc.type == "function" and tc.id, f"tool call {tc.id} has an id and type function")
        out.append((tc.function.name, json.loads(tc.function.arguments)))
    return out


def check_params(client, model, strict):
    """logprobs, top_logprobs, n, seed, penalties, echo, cached_tokens and their limits."""
    msgs = [{"role": "user", "content": "Say something."}]
    r = client.chat.completions.create(
        model=model, messages=msgs, max_tokens=8, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    check(len(content) > 0, "chat logprobs.content")
    for e in content:
        check(isinstance(e.logprob, float) and e.logprob <= 0, f"logprob {e.logprob}")
        check(bytes(e.bytes).decode("utf-8", "replace") == e.token, "bytes are the token's")
        check(len(e.top_logprobs) == 3, "three alternatives")
    streamed = []
    for chunk in client.chat.completions.create(
            model=model, messages=msgs, max_tokens=8, logprobs=True, top_logprobs=1, stream=True):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed.extend(chunk.choices[0].logprobs.content)
    check(len(streamed) == len(content), "streamed logprobs cover every token")
    c = client.completions.create(model=model, prompt="Say", max_tokens=6, logprobs=2)
    lp = c.choices[0].logprobs
    check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset),
          "completion logprobs lists line up")
    details = c.usage.prompt_tokens_details
    check(details is not None and isinstance(details.cached_tokens, int), "cached_tokens present")
    if strict:
        check(details.cached_tokens == 0, "no prefix cache in the fake")
    e = client.completions.create(model=model, prompt="Say", max_tokens=4, echo=True)
    check(e.choices[0].text.startswith("Say"), "echo starts with the prompt")
    n = client.chat.completions.create(model=model, messages=msgs, max_tokens=4, n=3, seed=7,
                                       temperature=1.0)
    check(sorted(ch.index for ch in n.choices) == [0, 1, 2], "n = 3 choices")
    seen = set()
    for chunk in client.chat.completions.create(
            model=model, messages=msgs, max_tokens=4, n=2, stream=True,
            stream_options={"include_usage": True}):
        for ch in chunk.choices:
            seen.add(ch.index)
    check(seen == {0, 1}, f"streamed choices {seen}")
    a1 = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, seed=5,
                                        temperature=1.0)
    a2 = client.chat.completions.create(model=model, messages=msgs, max_tokens=8, seed=5,
                                        temperature=1.0)
    check(a1.choices[0].message.content == a2.choices[0].message.content, "a seed reproduces")
    client.chat.completions.create(model=model, messages=msgs, max_tokens=4,
                                   presence_penalty=0.5, frequency_penalty=0.5,
                                   extra_body={"repetition_penalty": 1.1})
    for kwargs, param in [({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                          ({"n": 0}, "n"),
                          ({"logit_bias": {"5": 1}}, "logit_bias")]:
        try:
            client.chat.completions.create(model=model, messages=msgs, max_tokens=4, **kwargs)
            check(False, f"{kwargs} is refused")
        except openai.BadRequestError as err:
            body = err.body if isinstance(err.body, dict) else {}
            body = body.get("error", body)
            check(body.get("param") == param, f"{kwargs}: param {body.get('param')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", default="fake")
    ap.add_argument("--any-output", action="store_true")
    a = ap.parse_args()
    strict = not a.any_output
    client = openai.OpenAI(base_url=a.base_url, api_key="unused", max_retries=0)

    # Tools, not streamed.
    r = client.chat.completions.create(model=a.model, messages=USER, tools=TOOLS, max_tokens=512)
    msg = r.choices[0].message
    calls = calls_of(msg.tool_calls)
    if strict:
        check(r.choices[0].finish_reason == "tool_calls", "finish_reason tool_calls")
        check(calls == EXPECTED, f"two parallel calls with converted arguments: {calls}")
        check(extra(msg, "reasoning_content") == "Two tools are needed.\n", "reasoning_content")
        check(extra(msg, "reasoning") == "Two tools are needed.\n", "reasoning")
        check(msg.content is None, "no content beside the calls")
    with_tools = r.usage.prompt_tokens

    # Tools, streamed: deltas accumulated by index.
    acc, reasoning, content, finish = {}, "", "", None
    stream = client.chat.completions.create(
        model=a.model, messages=USER, tools=TOOLS, max_tokens=512, stream=True)
    for chunk in stream:
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        d = c.delta
        reasoning += extra(d, "reasoning_content") or ""
        content += d.content or ""
        for tc in d.tool_calls or []:
            slot = acc.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            slot["id"] = slot["id"] or tc.id
            slot["name"] += (tc.function.name or "") if tc.function else ""
            slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = c.finish_reason or finish
    streamed = [(s["name"], json.loads(s["arguments"])) for _, s in sorted(acc.items())]
    check(sorted(acc) == list(range(len(acc))), "streamed call indices count up from 0")
    check(all(s["id"] for s in acc.values()), "every streamed call has an id")
    if strict:
        check(streamed == EXPECTED, f"streamed calls: {streamed}")
        check(finish == "tool_calls", "streamed finish_reason tool_calls")
        check(reasoning == "Two tools are needed.\n", "streamed reasoning_content")
        check(content == "", "no streamed content")

    # The calls' results sent back.
    history = USER + [{
        "role": "assistant", "content": msg.content,
        "tool_calls": [tc.model_dump(exclude_none=True) for tc in msg.tool_calls or []],
    }]
    for tc in msg.tool_calls or []:
        history.append({"role": "tool", "tool_call_id": tc.id, "content": "sunny, 21 C"})
    r2 = client.chat.completions.create(model=a.model, messages=history, tools=TOOLS, max_tokens=64)
    check(r2.choices[0].message is not None, "a tool-result turn is answered")
    if strict:
        check(r2.usage.prompt_tokens > with_tools, "the tool results are in the prompt")

    # tool_choice none: no tools rendered, none parsed.
    r3 = client.chat.completions.create(
        model=a.model, messages=USER, tools=TOOLS, tool_choice="none", max_tokens=512)
    check(not r3.choices[0].message.tool_calls, "tool_choice none returns no calls")
    if strict:
        check(r3.usage.prompt_tokens < with_tools, "tool_choice none renders no tools")
        check("<tool_call>" in (r3.choices[0].message.content or ""), "call text stays content")

    # Thinking off through chat_template_kwargs.
    r4 = client.chat.completions.create(
        model=a.model, messages=USER, max_tokens=512,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    if strict:
        check(extra(r4.choices[0].message, "reasoning_content") is None, "thinking off: no reasoning")
        check((r4.choices[0].message.content or "").startswith("Two tools"), "thinking off: content")
    check_params(client, a.model, strict)
    print("all checks passed")


if __name__ == "__main__":
    main()
