//! `tool_choice` `required` and a named function are enforced: the prompt
//! ends with the forced opening of a call (after an empty think block when
//! thinking is on), and the model's continuation is parsed as a normal tool
//! call (`tool_calls`, `finish_reason: tool_calls`), streamed and not. On the
//! scripted fake (the script is the model's continuation) and on the real
//! engine with the CPU tiny model (random weights: its continuation is not a
//! call, so the forced opening comes back as content, never lost).

mod common;

use common::*;
use headroom_cpu::CpuBackend;
use headroom_engine::EngineConfig;
use headroom_model::{ModelConfig, Qwen35Model, Weights};
use headroom_server::client::post_json;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::{ChatTemplate, ServerConfig};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const OPEN: &str = "<tool_call>\n<function=";
const REST: &str = "get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>";
const ADD_REST: &str =
    "<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n2\n</parameter>\n</function>\n</tool_call>";

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
         "properties": {"city": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
         "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}
    ])
}

fn body(choice: Value, extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
                       "tools": tools(), "tool_choice": choice, "max_tokens": 400});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

fn named(name: &str) -> Value {
    json!({"type": "function", "function": {"name": name}})
}

async fn fake(script: &str) -> Running {
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

/// The non-streamed response's message and finish reason.
async fn whole(addr: SocketAddr, body: &Value) -> (Value, Value) {
    let r = post_json(addr, "/v1/chat/completions", body).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    (
        v["choices"][0]["message"].clone(),
        v["choices"][0]["finish_reason"].clone(),
    )
}

/// The streamed response's (content, [(name, arguments)], finish reason).
async fn streamed(addr: SocketAddr, body: &Value) -> (String, Vec<(String, String)>, String) {
    let mut b = body.clone();
    b["stream"] = json!(true);
    let (status, events) = stream_all(addr, "/v1/chat/completions", &b).await;
    assert_eq!(status, 200);
    let (mut content, mut calls, mut finish) = (String::new(), Vec::new(), String::new());
    for e in events.iter().filter(|e| *e != "[DONE]") {
        let v: Value = serde_json::from_str(e).unwrap();
        let c = &v["choices"][0];
        if let Some(t) = c["delta"]["content"].as_str() {
            content.push_str(t);
        }
        for tc in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push((String::new(), String::new()));
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                calls[i].0.push_str(n);
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                calls[i].1.push_str(a);
            }
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (content, calls, finish)
}

fn args(call: &Value) -> Value {
    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn required_forces_a_call_whose_name_the_model_picks() {
    let s = fake(REST).await;
    for extra in [json!({}), json!({"enable_thinking": false})] {
        let b = body(json!("required"), extra);
        let (msg, finish) = whole(s.addr, &b).await;
        assert_eq!(finish, "tool_calls", "{msg}");
        assert_eq!(msg["content"], Value::Null, "{msg}");
        assert!(msg.get("reasoning_content").is_none(), "{msg}");
        let calls = msg["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(args(&calls[0]), json!({"city": "Paris"}));
        let (content, calls, finish) = streamed(s.addr, &b).await;
        assert_eq!(finish, "tool_calls");
        assert_eq!(content, "");
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "get_weather");
        assert_eq!(
            serde_json::from_str::<Value>(&calls[0].1).unwrap(),
            json!({"city": "Paris"})
        );
    }
}

#[tokio::test]
async fn a_named_function_forces_a_call_of_it() {
    let s = fake(ADD_REST).await;
    let b = body(named("add"), json!({}));
    let (msg, finish) = whole(s.addr, &b).await;
    assert_eq!(finish, "tool_calls", "{msg}");
    assert_eq!(msg["tool_calls"][0]["function"]["name"], "add");
    assert_eq!(args(&msg["tool_calls"][0]), json!({"a": 1.5, "b": 2}));
    let (content, calls, finish) = streamed(s.addr, &b).await;
    assert_eq!((content.as_str(), finish.as_str()), ("", "tool_calls"));
    assert_eq!(calls[0].0, "add");
}

#[tokio::test]
async fn an_unfinished_forced_call_is_returned_as_content() {
    let s = fake("get_wea").await;
    let (msg, finish) = whole(s.addr, &body(json!("required"), json!({}))).await;
    assert_eq!(finish, "stop");
    assert_eq!(msg["content"], format!("{OPEN}get_wea"));
    assert!(msg.get("tool_calls").is_none(), "{msg}");
}

fn tiny() -> (Qwen35Model<CpuBackend>, usize) {
    let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
    let m = Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
    (m, cfg.vocab_size)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_engine_continues_after_the_forced_opening() {
    let (m, vocab) = tiny();
    let h = headroom_engine::spawn(
        m,
        EngineConfig {
            max_running: 4,
            max_context: 4096,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let s = start_with(
        Arc::new(h),
        ServerConfig::new("tiny-d256", vocab),
        ChatTemplate::qwen_shaped(),
        Duration::from_secs(5),
    )
    .await;
    // One tool: `auto` and the named choice render the same tools.
    let one = |choice: Value| {
        let mut b = body(choice, json!({"max_tokens": 8}));
        b["tools"] = json!([tools()[0].clone()]);
        b
    };
    let r = post_json(s.addr, "/v1/chat/completions", &one(json!("auto")))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let auto = r.json().unwrap()["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap();
    let r = post_json(s.addr, "/v1/chat/completions", &one(named("get_weather")))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json().unwrap();
    // The byte codec: one prompt token per byte of the forced text.
    let forced = "\n</think>\n\n<tool_call>\n<function=get_weather>\n";
    assert_eq!(v["usage"]["prompt_tokens"], auto + forced.len() as u64);
    assert_eq!(v["usage"]["completion_tokens"], 8);
    let msg = &v["choices"][0]["message"];
    // Random weights do not close the call: the opening comes back as content.
    let content = msg["content"].as_str().unwrap_or_default();
    assert!(
        content.starts_with("<tool_call>\n<function=get_weather>\n")
            || msg["tool_calls"][0]["function"]["name"] == "get_weather",
        "{msg}"
    );
}
