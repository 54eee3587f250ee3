//! Tool calls and reasoning over HTTP, on the scripted fake generator with
//! the byte codec (one token per byte: every byte boundary is a token
//! boundary) and the built-in template of Qwen3.5's shape: one, two and
//! malformed calls, with and without `<think>`, streamed and not (the
//! stream, accumulated as the OpenAI SDK does, equals the whole response);
//! tools in the prompt; `tool_choice`; a multi-turn history.

mod common;

use common::*;
use headroom_server::client::post_json;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::{ChatTemplate, ServerConfig};
use serde_json::{json, Map, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const WEATHER: &str = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
const ADD: &str = "<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n[2, 3]\n</parameter>\n</function>\n</tool_call>";

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
         "parameters": {"type": "object", "properties": {
             "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
         "properties": {"a": {"type": "number"}, "b": {"type": "array"}}}}}
    ])
}

/// A server whose generator answers every request with `script`.
async fn server(script: &str) -> Running {
    let f = FakeConfig {
        max_context: 1 << 16,
        token_delay: Duration::ZERO,
        script: Some(script.bytes().map(u32::from).collect()),
        ..FakeConfig::default()
    };
    start_with(
        Arc::new(FakeGenerator::new(f)),
        ServerConfig::new("fake", 512),
        ChatTemplate::qwen_shaped(),
        Duration::from_secs(5),
    )
    .await
}

fn body(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "Weather in Paris? And 1.5 + [2, 3]?"}],
                       "tools": tools(), "max_tokens": 4000});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// A stream's chunks accumulated into a message as the OpenAI SDK does,
/// and the finish reason; checks the tool-call indices and ids on the way.
fn accumulate(events: &[String]) -> (Value, String) {
    let (mut content, mut reasoning) = (String::new(), String::new());
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = String::new();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    for (i, e) in events[..events.len() - 1].iter().enumerate() {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        let c = &v["choices"][0];
        assert_eq!(
            c["delta"].get("role").is_some(),
            i == 0,
            "role in the first chunk only"
        );
        if let Some(t) = c["delta"]["content"].as_str() {
            content.push_str(t);
        }
        if let Some(t) = c["delta"]["reasoning_content"].as_str() {
            assert_eq!(c["delta"]["reasoning"], t);
            reasoning.push_str(t);
        }
        for tc in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = tc["index"].as_u64().unwrap() as usize;
            if index == calls.len() {
                assert!(
                    tc["id"].as_str().is_some_and(|id| id.starts_with("call_")),
                    "{tc}"
                );
                assert_eq!(tc["type"], "function");
                calls.push(json!({"id": tc["id"], "type": "function",
                    "function": {"name": tc["function"]["name"], "arguments": ""}}));
            }
            assert!(index < calls.len(), "indices count up from 0: {tc}");
            let args = tc["function"]["arguments"].as_str().unwrap_or_default();
            let acc = calls[index]["function"]["arguments"]
                .as_str()
                .unwrap()
                .to_string()
                + args;
            calls[index]["function"]["arguments"] = acc.into();
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    let mut msg = Map::new();
    msg.insert("role".into(), "assistant".into());
    let bare = content.is_empty() && (!reasoning.is_empty() || !calls.is_empty());
    msg.insert(
        "content".into(),
        if bare { Value::Null } else { content.into() },
    );
    if !reasoning.is_empty() {
        msg.insert("reasoning_content".into(), reasoning.clone().into());
        msg.insert("reasoning".into(), reasoning.into());
    }
    if !calls.is_empty() {
        msg.insert("tool_calls".into(), calls.into());
    }
    (Value::Object(msg), finish)
}

/// The message and finish reason of `body`, streamed and not; asserts they agree
/// (ids aside: each request numbers its own).
async fn both(addr: SocketAddr, body: &Value) -> (Value, String) {
    let r = post_json(addr, "/v1/chat/completions", body).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    let msg = v["choices"][0]["message"].clone();
    let finish = v["choices"][0]["finish_reason"]
        .as_str()
        .unwrap()
        .to_string();
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, events) = stream_all(addr, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200);
    let (smsg, sfinish) = accumulate(&events);
    let strip = |m: &Value| {
        let mut m = m.clone();
        for c in m["tool_calls"].as_array_mut().into_iter().flatten() {
            c["id"] = json!("-");
        }
        m
    };
    assert_eq!(strip(&smsg), strip(&msg), "streamed vs whole");
    assert_eq!(sfinish, finish);
    (msg, finish)
}

fn args(call: &Value) -> Value {
    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn one_call_without_thinking() {
    let s = server(&format!("\n\n{WEATHER}")).await;
    let (msg, finish) = both(
        s.addr,
        &body(json!({"chat_template_kwargs": {"enable_thinking": false}})),
    )
    .await;
    assert_eq!(finish, "tool_calls");
    assert_eq!(msg["content"], Value::Null);
    assert!(msg.get("reasoning_content").is_none(), "{msg}");
    let calls = msg["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    assert_eq!(args(&calls[0]), json!({"city": "Paris", "days": 3}));
}

#[tokio::test]
async fn two_calls_after_reasoning_with_distinct_ids() {
    let s = server(&format!(
        "Two tools are needed 🙂.\n</think>\n\nLet me check.\n{WEATHER}\n{ADD}"
    ))
    .await;
    let (msg, finish) = both(s.addr, &body(json!({}))).await;
    assert_eq!(finish, "tool_calls");
    assert_eq!(msg["reasoning_content"], "Two tools are needed 🙂.\n");
    assert_eq!(msg["reasoning"], "Two tools are needed 🙂.\n");
    assert_eq!(msg["content"], "Let me check.");
    let calls = msg["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    assert_eq!(args(&calls[1]), json!({"a": 1.5, "b": [2, 3]}));
}

#[tokio::test]
async fn a_call_ends_reasoning_without_a_closing_tag() {
    let s = server(&format!("I should call it.\n{WEATHER}")).await;
    let (msg, finish) = both(s.addr, &body(json!({}))).await;
    assert_eq!(finish, "tool_calls");
    assert_eq!(msg["reasoning_content"], "I should call it.\n");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "get_weather");
}

#[tokio::test]
async fn reasoning_and_content_without_tools() {
    let s = server("<think>\nhmm\n</think>\n\nParis is sunny.").await;
    let no_think = json!({"tools": null, "chat_template_kwargs": {"enable_thinking": false}});
    let (msg, finish) = both(s.addr, &body(no_think)).await;
    assert_eq!(finish, "stop");
    assert_eq!(msg["reasoning_content"], "\nhmm\n");
    assert_eq!(msg["content"], "Paris is sunny.");
    assert!(msg.get("tool_calls").is_none());
}

#[tokio::test]
async fn malformed_calls_come_back_as_content() {
    let unknown = "<tool_call>\n<function=launch>\n</function>\n</tool_call>";
    let bad_param =
        "<tool_call>\n<function=add>\n<parameter=c>\n1\n</parameter>\n</function>\n</tool_call>";
    let no_end = "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</tool_call>";
    for bad in [unknown, bad_param, no_end] {
        let s = server(&format!("r</think>{bad}")).await;
        let (msg, finish) = both(s.addr, &body(json!({}))).await;
        assert_eq!(finish, "stop", "{bad}");
        assert_eq!(msg["content"], bad);
        assert!(msg.get("tool_calls").is_none(), "{msg}");
    }
    // One good call beside a bad one: the good one is a call.
    let s = server(&format!("r</think>{unknown}\n{WEATHER}")).await;
    let (msg, finish) = both(s.addr, &body(json!({}))).await;
    assert_eq!(finish, "tool_calls");
    assert_eq!(msg["content"], unknown);
    assert_eq!(msg["tool_calls"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_call_cut_by_max_tokens_is_content_with_finish_length() {
    let script = format!("r</think>{WEATHER}");
    let s = server(&script).await;
    let cut = script.len() - 20;
    let (msg, finish) = both(s.addr, &body(json!({"max_tokens": cut}))).await;
    assert_eq!(finish, "length");
    assert_eq!(msg["content"], WEATHER[..WEATHER.len() - 20]);
    assert!(msg.get("tool_calls").is_none());
}

#[tokio::test]
async fn tool_call_text_is_content_with_tool_choice_none_or_no_tools() {
    let s = server(&format!("r</think>{WEATHER}")).await;
    for extra in [json!({"tool_choice": "none"}), json!({"tools": null})] {
        let (msg, finish) = both(s.addr, &body(extra)).await;
        assert_eq!(finish, "stop");
        assert_eq!(msg["reasoning_content"], "r");
        assert_eq!(msg["content"], WEATHER);
    }
    // A named choice parses only that function: the forced opening of an
    // `add` call followed by another function's block does not decode.
    let named = json!({"tool_choice": {"type": "function", "function": {"name": "add"}}});
    let (msg, finish) = both(s.addr, &body(named)).await;
    assert_eq!(finish, "stop");
    assert_eq!(
        msg["content"],
        format!("<tool_call>\n<function=add>\nr</think>{WEATHER}")
    );
}

async fn prompt_tokens(addr: SocketAddr, body: &Value) -> u64 {
    let mut b = body.clone();
    b["max_tokens"] = json!(1);
    let r = post_json(addr, "/v1/chat/completions", &b).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().unwrap()["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn tools_are_rendered_into_the_prompt_unless_tool_choice_is_none() {
    let s = server("ok").await;
    let with = prompt_tokens(s.addr, &body(json!({}))).await;
    let without = prompt_tokens(s.addr, &body(json!({"tools": null}))).await;
    let none = prompt_tokens(s.addr, &body(json!({"tool_choice": "none"}))).await;
    let required = prompt_tokens(s.addr, &body(json!({"tool_choice": "required"}))).await;
    let named = prompt_tokens(
        s.addr,
        &body(json!({"tool_choice": {"type": "function", "function": {"name": "add"}}})),
    )
    .await;
    assert!(with > without + 200, "{with} vs {without}");
    assert_eq!(none, without);
    // `required` closes the open think block and forces a call's opening.
    assert_eq!(
        required,
        with + "\n</think>\n\n<tool_call>\n<function=".len() as u64
    );
    assert!(without < named && named < required, "{named}");
    // thinking off adds the empty think block.
    let off = prompt_tokens(
        s.addr,
        &body(json!({"tools": null, "enable_thinking": false})),
    )
    .await;
    assert_eq!(off, without + "\n</think>\n\n".len() as u64);
}

#[tokio::test]
async fn a_tool_result_history_is_accepted_and_rendered() {
    let s = server("It is sunny.").await;
    let first = body(json!({}));
    let mut history = first.clone();
    history["messages"] = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "reasoning_content": "need it",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}
    ]);
    let a = prompt_tokens(s.addr, &first).await;
    let b = prompt_tokens(s.addr, &history).await;
    assert!(b > a, "{b} vs {a}");
    let (msg, finish) = both(s.addr, &history).await;
    assert_eq!(
        (msg["reasoning_content"].as_str(), finish.as_str()),
        (Some("It is sunny."), "stop")
    );
    let mut bad = history.clone();
    bad["messages"][1]["tool_calls"][0]["function"]["arguments"] = json!("{oops");
    let r = post_json(s.addr, "/v1/chat/completions", &bad)
        .await
        .unwrap();
    assert_eq!(r.status, 400);
    assert_eq!(error_of(&r)["error"]["param"], "messages");
    let mut bad = first.clone();
    bad["tool_choice"] = json!("sometimes");
    let r = post_json(s.addr, "/v1/chat/completions", &bad)
        .await
        .unwrap();
    assert_eq!(
        (r.status, error_of(&r)["error"]["param"].as_str()),
        (400, Some("tool_choice"))
    );
}

/// A server over `script` with the Qwen-shaped template and `cfg`.
async fn server_with(script: &str, cfg: ServerConfig) -> Running {
    let f = FakeConfig {
        script: Some(script.bytes().map(u32::from).collect()),
        token_delay: Duration::ZERO,
        max_context: 1 << 16,
        ..FakeConfig::default()
    };
    start_with(
        Arc::new(FakeGenerator::new(f)),
        cfg,
        ChatTemplate::qwen_shaped(),
        Duration::from_secs(5),
    )
    .await
}

#[tokio::test]
async fn the_server_default_for_thinking_applies_unless_the_request_sets_it() {
    let cfg = ServerConfig {
        enable_thinking: Some(false),
        ..ServerConfig::new("fake", 512)
    };
    let s = server_with("plain answer", cfg).await;
    let (msg, _) = both(s.addr, &body(json!({"tools": null}))).await;
    assert_eq!(
        msg["content"], "plain answer",
        "thinking off: the output is content"
    );
    let (msg, _) = both(
        s.addr,
        &body(json!({"tools": null, "enable_thinking": true})),
    )
    .await;
    assert_eq!(
        msg["reasoning_content"], "plain answer",
        "the request turns it on"
    );
    let (msg, _) = both(
        s.addr,
        &body(json!({"tools": null, "chat_template_kwargs": {"enable_thinking": true}})),
    )
    .await;
    assert_eq!(msg["reasoning_content"], "plain answer");
}

#[tokio::test]
async fn without_the_reasoning_parser_think_tags_stay_in_content() {
    let cfg = ServerConfig {
        reasoning_parser: false,
        ..ServerConfig::new("fake", 512)
    };
    let s = server_with(&format!("r</think>{WEATHER}"), cfg).await;
    let (msg, finish) = both(s.addr, &body(json!({}))).await;
    assert_eq!(finish, "tool_calls");
    assert_eq!(msg["content"], "r</think>");
    assert!(msg.get("reasoning_content").is_none(), "{msg}");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "get_weather");
}
