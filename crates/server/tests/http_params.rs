//! The sampling and output parameters over the scripted fake: logprobs
//! shapes (chat and completions, whole and streamed), their limits, `n`
//! choices (indices, summed usage, interleaved streams), `echo` and
//! `usage.prompt_tokens_details.cached_tokens`.

mod common;

use common::*;
use headroom_server::client::post_json;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

async fn fake() -> Running {
    let f = FakeConfig {
        token_delay: Duration::ZERO,
        ..FakeConfig::default()
    };
    start(
        Arc::new(FakeGenerator::new(f)),
        ServerConfig::new("fake", 512),
        Duration::from_secs(5),
    )
    .await
}

fn chat(extra: Value) -> Value {
    let mut b = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_logprobs_have_openais_shape_whole_and_streamed() {
    let s = fake().await;
    let body = chat(json!({"logprobs": true, "top_logprobs": 2}));
    let v = post_json(s.addr, "/v1/chat/completions", &body)
        .await
        .unwrap()
        .json()
        .unwrap();
    let text = v["choices"][0]["message"]["content"].as_str().unwrap();
    let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3, "{v}");
    let joined: String = content
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);
    let first = &content[0];
    let t = first["token"].as_str().unwrap();
    assert_eq!(first["logprob"], -0.5);
    assert_eq!(first["bytes"], json!(t.as_bytes()));
    let top = first["top_logprobs"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    assert_eq!(
        (top[0]["token"].as_str(), &top[1]["logprob"]),
        (Some(t), &json!(-1.5))
    );
    assert!(v["usage"]["prompt_tokens_details"]["cached_tokens"].is_number());

    let mut streamed = body.clone();
    streamed["stream"] = true.into();
    let (status, ev) = stream_all(s.addr, "/v1/chat/completions", &streamed).await;
    assert_eq!(status, 200);
    let entries: Vec<Value> = ev
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(entries, content.to_vec());

    // Without logprobs they stay null.
    let v = post_json(s.addr, "/v1/chat/completions", &chat(json!({})))
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["choices"][0]["logprobs"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_logprobs_and_echo() {
    let s = fake().await;
    let v = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 4, "logprobs": 1}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(v["choices"][0]["text"], "hiAB");
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"], json!(["h", "i", "A", "B"]));
    assert_eq!(lp["token_logprobs"], json!([-0.5, -0.5, -0.5, -0.5]));
    assert_eq!(lp["text_offset"], json!([0, 1, 2, 3]));
    assert_eq!(lp["top_logprobs"][2], json!({"A": -0.5}));

    let v = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "echo": true}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    assert_eq!(v["choices"][0]["text"], "hihi");
    let (_, ev) = stream_all(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2, "echo": true, "stream": true}),
    )
    .await;
    assert_eq!(stream_text(&ev), "hihi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_400s_naming_the_parameter() {
    let s = fake().await;
    for (path, body, param) in [
        (
            "/v1/chat/completions",
            chat(json!({"logprobs": true, "top_logprobs": 21})),
            "top_logprobs",
        ),
        ("/v1/chat/completions", chat(json!({"n": 0})), "n"),
        ("/v1/chat/completions", chat(json!({"n": 9})), "n"),
        (
            "/v1/completions",
            json!({"prompt": "a", "logprobs": 6}),
            "logprobs",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "presence_penalty": 2.5}),
            "presence_penalty",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "repetition_penalty": -1}),
            "repetition_penalty",
        ),
    ] {
        let r = post_json(s.addr, path, &body).await.unwrap();
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(error_of(&r)["error"]["param"], param, "{body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_choices_have_indices_summed_usage_and_interleaved_streams() {
    let s = fake().await;
    let v = post_json(
        s.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 3, "n": 3}),
    )
    .await
    .unwrap()
    .json()
    .unwrap();
    let choices = v["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3);
    for (i, c) in choices.iter().enumerate() {
        assert_eq!(c["index"], i);
        assert_eq!(c["text"], "hiA");
    }
    assert_eq!(v["usage"]["prompt_tokens"], 2);
    assert_eq!(v["usage"]["completion_tokens"], 9);
    assert_eq!(v["usage"]["total_tokens"], 11);

    let body = chat(json!({"n": 2, "stream": true, "stream_options": {"include_usage": true}}));
    let (_, ev) = stream_all(s.addr, "/v1/chat/completions", &body).await;
    assert_eq!(ev.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(ev.iter().filter(|e| *e == "[DONE]").count(), 1);
    let chunks: Vec<Value> = ev[..ev.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
    for i in 0..2 {
        let mine: Vec<&Value> = chunks
            .iter()
            .filter(|c| c["choices"][0]["index"] == i)
            .collect();
        let text: String = mine
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert!(!text.is_empty(), "choice {i}");
        assert_eq!(mine[0]["choices"][0]["delta"]["role"], "assistant");
        let finishes = mine
            .iter()
            .filter(|c| c["choices"][0]["finish_reason"].is_string())
            .count();
        assert_eq!(finishes, 1, "choice {i}");
    }
}
