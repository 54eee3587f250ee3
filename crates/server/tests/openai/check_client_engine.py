"""The official `openai` client against a server over the real engine (a
CPU tiny model with random weights, so its text is arbitrary): every
response must parse into the client's types with OpenAI's shapes, tools must
render into the prompt (and `tool_choice: none` must not), `required`
must force the call's opening, a tool result must be accepted back in the
history, and reasoning, logprobs and `n` must come back where the client
reads them. Prints "all checks passed" and exits 0, or raises."""

import argparse

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
FINISHES = {"stop", "length", "tool_calls"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    c = OpenAI(base_url=a.base_url, api_key="none")

    def chat(**kw):
        return c.chat.completions.create(model=a.model, messages=kw.pop("messages", USER), max_tokens=6, **kw)

    plain = chat()
    tools = chat(tools=TOOLS)
    none = chat(tools=TOOLS, tool_choice="none")
    required = chat(tools=TOOLS, tool_choice="required")
    for r in (plain, tools, none, required):
        assert r.object == "chat.completion", r
        assert r.choices[0].finish_reason in FINISHES, r.choices[0].finish_reason
        assert r.usage.completion_tokens >= 1, r.usage
    assert tools.usage.prompt_tokens > plain.usage.prompt_tokens, (tools.usage, plain.usage)
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens, (none.usage, plain.usage)
    assert required.usage.prompt_tokens > tools.usage.prompt_tokens, (required.usage, tools.usage)
    m = required.choices[0].message
    assert m.tool_calls or (m.content or "").startswith("<tool_call>"), m

    chunks = list(chat(tools=TOOLS, stream=True, stream_options={"include_usage": True}))
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finishes) == 1 and finishes[0] in FINISHES, finishes
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == tools.usage.prompt_tokens

    history = USER + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    back = chat(messages=history, tools=TOOLS)
    assert back.choices[0].finish_reason in FINISHES
    assert back.usage.prompt_tokens > tools.usage.prompt_tokens

    think = chat(extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    msg = think.choices[0].message
    # The random model may or may not close its think block: the text is in
    # reasoning_content or content, and the client reads both fields.
    extra = getattr(msg, "model_extra", None) or {}
    assert (extra.get("reasoning_content") or "") + (msg.content or "") != "" or think.usage.completion_tokens >= 1

    lp = chat(logprobs=True, top_logprobs=2)
    content = lp.choices[0].logprobs.content
    assert len(content) == lp.usage.completion_tokens, (len(content), lp.usage)
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0.0 for t in content)

    two = chat(n=2, temperature=1.0, seed=3)
    assert [ch.index for ch in two.choices] == [0, 1], two.choices

    print("all checks passed")


if __name__ == "__main__":
    main()
