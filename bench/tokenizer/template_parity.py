"""Template parity: the chat prompt Headroom renders for a chat request is
byte-for-byte the one transformers renders (its own renderer,
`transformers.utils.chat_template_utils.render_jinja_template`) for the same
messages, tools and template variables, over 24 requests: system prompts,
multi-turn, tools, tool calls and tool results in the history, reasoning on
and off, earlier turns' reasoning, `tool_choice` none / auto / required /
named, without a generation prompt.

    python3 template_parity.py [--template FILE | --model-dir DIR] [--headroom CMD]

Default template: Headroom's built-in one of Qwen3.5's shape
(crates/server/src/template/qwen3_5.jinja); `--model-dir` takes a
checkpoint's (chat_template.jinja, else tokenizer_config.json's
chat_template), e.g. a Qwen3.6 download. Headroom's side is the
`render_chat` example of crates/server, built and run through cargo unless
`--headroom` gives its command. Needs `pip install transformers jinja2`
(no model, no network: the renderer works on the template text alone).

What transformers is given is what an OpenAI-compatible server hands it
(vLLM's preprocessing): messages as sent, except that a tool call's
`arguments` JSON string is parsed into a mapping; `tools` as sent, none under
`tool_choice: "none"`, only the named one under a named choice; template
variables from `chat_template_kwargs`. Under `tool_choice` "required" or a
named function Headroom forces the opening of a call after the generation
prompt (docs/server.md, Tools); the expected text is transformers' rendering
with that rule applied, so the rule itself is checked too, not only the
template. Exits 1 on any difference (and prints the first differing bytes).
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

from transformers.utils.chat_template_utils import render_jinja_template

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILTIN = os.path.join(REPO, "crates", "server", "src", "template", "qwen3_5.jinja")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city <now>, in °C",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "the city"},
        "days": {"type": "integer"}}, "required": ["city"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "array", "items": {"type": "number"}}}}}}
TOOLS = [WEATHER, ADD]

SYS = {"role": "system", "content": "You are terse. Réponds en français si on te parle français."}
U1 = {"role": "user", "content": "What's the weather in Paris? 🙂"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 3}"}}]}
TWO_CALLS = {"role": "assistant", "content": "Checking both.", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
    {"id": "call_2", "type": "function",
     "function": {"name": "add", "arguments": "{\"a\": 1.5, \"b\": [2, 3]}"}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"}
RESULT2 = {"role": "tool", "tool_call_id": "call_2", "content": "[3.5, 4.5]"}
A1 = {"role": "assistant", "content": "It is 21 °C and clear."}
A_THINK = {"role": "assistant", "content": "<think>\nThey want the weather.\n</think>\n\nIt is sunny."}
A_REASONING = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Look it up."}
U2 = {"role": "user", "content": "And tomorrow?"}


def cases():
    """(name, request body) of every case."""
    c = [
        ("one user turn", {"messages": [U1]}),
        ("system and user", {"messages": [SYS, U1]}),
        ("thinking off", {"messages": [SYS, U1], "chat_template_kwargs": {"enable_thinking": False}}),
        ("thinking on explicitly", {"messages": [U1], "chat_template_kwargs": {"enable_thinking": True}}),
        ("multi-turn", {"messages": [SYS, U1, A1, U2]}),
        ("multi-turn thinking off", {"messages": [U1, A1, U2],
                                     "chat_template_kwargs": {"enable_thinking": False}}),
        ("earlier reasoning in content", {"messages": [U1, A_THINK, U2]}),
        ("earlier reasoning_content", {"messages": [U1, A_REASONING, U2]}),
        ("reasoning in the last assistant turn", {"messages": [U1, A_THINK],
                                                  "add_generation_prompt": False}),
        ("tools", {"messages": [U1], "tools": TOOLS}),
        ("tools and system", {"messages": [SYS, U1], "tools": TOOLS}),
        ("tools thinking off", {"messages": [U1], "tools": TOOLS,
                                "chat_template_kwargs": {"enable_thinking": False}}),
        ("tool_choice none", {"messages": [U1], "tools": TOOLS, "tool_choice": "none"}),
        ("tool_choice auto", {"messages": [U1], "tools": TOOLS, "tool_choice": "auto"}),
        ("tool_choice required", {"messages": [U1], "tools": TOOLS, "tool_choice": "required"}),
        ("tool_choice required thinking off", {
            "messages": [U1], "tools": TOOLS, "tool_choice": "required",
            "chat_template_kwargs": {"enable_thinking": False}}),
        ("tool_choice named", {"messages": [SYS, U1], "tools": TOOLS,
                               "tool_choice": {"type": "function", "function": {"name": "add"}}}),
        ("a call and its result", {"messages": [U1, CALL, RESULT], "tools": TOOLS}),
        ("a call, its result, the answer, a new question",
         {"messages": [SYS, U1, CALL, RESULT, A1, U2], "tools": TOOLS}),
        ("two calls and two results", {"messages": [U1, TWO_CALLS, RESULT, RESULT2], "tools": TOOLS}),
        ("two calls thinking off", {"messages": [U1, TWO_CALLS, RESULT, RESULT2], "tools": TOOLS,
                                    "chat_template_kwargs": {"enable_thinking": False}}),
        ("a call with reasoning_content", {"messages": [
            U1, dict(CALL, reasoning_content="I need the weather."), RESULT], "tools": TOOLS}),
        ("no generation prompt", {"messages": [SYS, U1, A1], "add_generation_prompt": False}),
        ("history with calls but no tools now", {"messages": [U1, CALL, RESULT, A1, U2]}),
    ]
    return c


def forced_opening(body):
    choice = body.get("tool_choice")
    if not body.get("tools") or not body.get("add_generation_prompt", True):
        return ""
    if choice == "required":
        return "<tool_call>\n<function="
    if isinstance(choice, dict):
        return "<tool_call>\n<function=" + choice["function"]["name"] + ">\n"
    return ""


def transformers_text(body, template):
    """What transformers renders for `body`, with Headroom's forcing rule applied."""
    messages = copy.deepcopy(body["messages"])
    for m in messages:
        for call in m.get("tool_calls") or []:
            args = call["function"].get("arguments")
            if isinstance(args, str):
                call["function"]["arguments"] = json.loads(args)
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if choice == "none":
        tools = None
    elif isinstance(choice, dict):
        tools = [t for t in tools if t["function"]["name"] == choice["function"]["name"]]
    add_gen = body.get("add_generation_prompt", True)
    out = render_jinja_template(conversations=[messages], tools=tools, chat_template=template,
                                add_generation_prompt=add_gen,
                                **body.get("chat_template_kwargs", {}))
    text = out[0][0] if isinstance(out, tuple) else out[0]
    forced = forced_opening(body)
    if forced:
        opened, closed = text.rfind("<think>"), text.rfind("</think>")
        if opened > closed:
            if not text.endswith("\n"):
                text += "\n"
            text += "\n</think>\n\n"
        text += forced
    return text


def template_of(args):
    if args.model_dir:
        path = os.path.join(args.model_dir, "chat_template.jinja")
        if os.path.exists(path):
            return open(path, encoding="utf-8").read(), ["--model-dir", args.model_dir]
        with open(os.path.join(args.model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            t = json.load(f)["chat_template"]
        if isinstance(t, list):
            t = next(x["template"] for x in t if x["name"] == "default")
        return t, ["--model-dir", args.model_dir]
    path = args.template or BUILTIN
    return open(path, encoding="utf-8").read(), ["--template", path]


def headroom_texts(bodies, flags, command):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        # Each body as JSON text: the server's parser reads it, keys in order.
        json.dump([json.dumps(dict(b, model="parity"), ensure_ascii=False) for b in bodies], f,
                  ensure_ascii=False)
        path = f.name
    try:
        cmd = (command.split() if command else
               ["cargo", "run", "-q", "--release", "-p", "headroom-server", "--example", "render_chat", "--"])
        out = subprocess.run(cmd + flags + [path], cwd=REPO, check=True, capture_output=True, text=True)
    finally:
        os.unlink(path)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--template")
    g.add_argument("--model-dir")
    ap.add_argument("--headroom", help="command that runs render_chat (default: through cargo)")
    args = ap.parse_args()
    template, flags = template_of(args)
    named = cases()
    bodies = [b for _, b in named]
    ours = headroom_texts(bodies, flags, args.headroom)
    bad = 0
    for (name, body), got in zip(named, ours):
        want = transformers_text(body, template)
        if "error" in got:
            print(f"FAIL {name}: headroom refused it: {got['error']}")
            bad += 1
        elif got["text"] != want:
            at = next((i for i, (a, b) in enumerate(zip(got["text"], want)) if a != b),
                      min(len(got["text"]), len(want)))
            print(f"FAIL {name}: first difference at byte {at}:\n"
                  f"  headroom:     {got['text'][max(0, at - 40):at + 40]!r}\n"
                  f"  transformers: {want[max(0, at - 40):at + 40]!r}")
            bad += 1
        else:
            print(f"ok   {name} ({len(want)} chars)")
    print(f"{len(named) - bad} of {len(named)} identical")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
