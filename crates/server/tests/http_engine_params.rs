//! The sampling and output parameters on the real engine (CPU backend,
//! synthetic `tiny-d256`, byte tokenizer): logprobs equal a host
//! log-softmax of the same logits within 1e-5, the HTTP answer carries the
//! engine's values, penalties change the chosen tokens, a seed reproduces
//! sampled text, and choice `i` of `n` is the request seeded `seed + i`.

mod common;

use common::*;
use headroom_cpu::CpuBackend;
use headroom_engine::sampling::log_softmax;
use headroom_engine::{
    EngineConfig, EngineCore, GenerateRequest, SamplingExtras, StreamEvent, TokenLogprobs,
};
use headroom_model::{ModelConfig, Qwen35Model, Weights};
use headroom_server::client::post_json;
use headroom_server::ServerConfig;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn model() -> (Qwen35Model<CpuBackend>, usize) {
    let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
    let m = Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
    (m, cfg.vocab_size)
}

fn engine_cfg() -> EngineConfig {
    EngineConfig {
        max_running: 8,
        max_context: 1024,
        ..EngineConfig::default()
    }
}

async fn server() -> Running {
    let (m, vocab) = model();
    let h = headroom_engine::spawn(m, engine_cfg()).unwrap();
    start(
        Arc::new(h),
        ServerConfig::new("tiny-d256", vocab),
        Duration::from_secs(5),
    )
    .await
}

const PROMPT: &str = "The quick brown fox";

async fn completion(s: &Running, extra: Value) -> Value {
    let mut b = json!({"prompt": PROMPT, "max_tokens": 8, "ignore_eos": true});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    let r = post_json(s.addr, "/v1/completions", &b).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    r.json().unwrap()
}

#[test]
fn logprobs_equal_a_host_log_softmax_of_the_same_logits() {
    let (m, _) = model();
    let cfg = EngineConfig {
        capture_logits: true,
        ..engine_cfg()
    };
    let mut core = EngineCore::new(m, cfg).unwrap();
    let mut r = GenerateRequest::greedy(PROMPT.bytes().map(u32::from).collect(), 6);
    r.ignore_eos = true;
    r.extras = SamplingExtras {
        logprobs: Some(5),
        ..SamplingExtras::default()
    };
    let mut stream = core.submit(r).unwrap();
    let mut logits = Vec::new();
    while let Some(rep) = core.step().unwrap() {
        logits.extend(rep.sampled.into_iter().map(|s| s.logits.unwrap()));
    }
    let mut got: Vec<TokenLogprobs> = Vec::new();
    let mut tokens = Vec::new();
    while let Some(e) = stream.try_next() {
        match e {
            StreamEvent::Logprobs(lp) => got.push(lp),
            StreamEvent::Token(t) => tokens.push(t),
            _ => {}
        }
    }
    assert_eq!((got.len(), logits.len(), tokens.len()), (6, 6, 6));
    for ((lp, row), t) in got.iter().zip(&logits).zip(&tokens) {
        let want = log_softmax(row);
        assert_eq!(lp.token, *t);
        assert!((lp.logprob - want[*t as usize]).abs() < 1e-5);
        assert_eq!(lp.top.len(), 5);
        assert_eq!(lp.top[0].0, *t, "greedy draws the most likely token");
        for &(id, x) in &lp.top {
            assert!((x - want[id as usize]).abs() < 1e-5, "token {id}");
        }
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_logprobs_are_the_engines_and_penalties_change_the_tokens() {
    let s = server().await;
    let v = completion(&s, json!({"temperature": 0, "logprobs": 2})).await;
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 8, "{v}");
    let text = v["choices"][0]["text"].as_str().unwrap();
    // Greedy: the drawn token is the most likely one, and sums match a distribution.
    for (i, x) in lp["token_logprobs"].as_array().unwrap().iter().enumerate() {
        let x = x.as_f64().unwrap();
        assert!(x <= 0.0);
        let best = lp["top_logprobs"][i]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(x, best);
    }
    // The logprobs do not change what is drawn.
    let plain = completion(&s, json!({"temperature": 0})).await;
    assert_eq!(plain["choices"][0]["text"], text);
    // Over 48 greedy tokens the tiny model repeats itself: penalising the
    // generated tokens (and, for the repetition penalty, the prompt's) changes
    // the text.
    let long = json!({"temperature": 0, "max_tokens": 48});
    let greedy = completion(&s, long.clone()).await;
    let greedy = greedy["choices"][0]["text"].as_str().unwrap().to_string();
    for penalty in [
        json!({"repetition_penalty": 50.0}),
        json!({"frequency_penalty": 2.0}),
        json!({"presence_penalty": 2.0}),
    ] {
        let mut b = long.clone();
        for (k, v) in penalty.as_object().unwrap() {
            b[k] = v.clone();
        }
        let v = completion(&s, b).await;
        assert_ne!(
            v["choices"][0]["text"].as_str().unwrap(),
            greedy,
            "{penalty} changed nothing"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_reproduces_sampling_and_choice_i_uses_seed_plus_i() {
    let s = server().await;
    let text = |v: &Value, i: usize| v["choices"][i]["text"].as_str().unwrap().to_string();
    let a = completion(&s, json!({"temperature": 1.0, "seed": 11})).await;
    let b = completion(&s, json!({"temperature": 1.0, "seed": 11})).await;
    assert_eq!(text(&a, 0), text(&b, 0));
    let mut differ = false;
    for seed in [12, 13, 14] {
        let c = completion(&s, json!({"temperature": 1.0, "seed": seed})).await;
        differ |= text(&c, 0) != text(&a, 0);
    }
    assert!(differ, "three other seeds all drew the same text");
    let n = completion(&s, json!({"temperature": 1.0, "seed": 11, "n": 3})).await;
    assert_eq!(n["choices"].as_array().unwrap().len(), 3);
    assert_eq!(text(&n, 0), text(&a, 0));
    let second = completion(&s, json!({"temperature": 1.0, "seed": 12})).await;
    assert_eq!(text(&n, 1), text(&second, 0));
    assert_eq!(n["usage"]["completion_tokens"], 24);
    assert_eq!(n["usage"]["prompt_tokens"], PROMPT.len());
    assert_eq!(n["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_string_reports_the_prefix_caches_tokens() {
    let s = server().await;
    let prompt = PROMPT.repeat(8);
    let body = json!({"prompt": prompt, "max_tokens": 8, "ignore_eos": true});
    let first = post_json(s.addr, "/v1/completions", &body).await.unwrap();
    let first: Value = first.json().unwrap();
    let text = first["choices"][0]["text"].as_str().unwrap().to_string();
    let stop: String = text.chars().nth(1).expect("two characters drawn").into();
    let cached = |v: &Value| v["usage"]["prompt_tokens_details"]["cached_tokens"].clone();
    let again = post_json(s.addr, "/v1/completions", &body).await.unwrap();
    let again: Value = again.json().unwrap();
    assert!(cached(&again).as_u64().unwrap() > 0, "{again}");
    let mut stopped = body.clone();
    stopped["stop"] = json!([stop]);
    let v: Value = post_json(s.addr, "/v1/completions", &stopped)
        .await
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
    assert_eq!(cached(&v), cached(&again), "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], prompt.len());
    stopped["stream"] = json!(true);
    stopped["stream_options"] = json!({"include_usage": true});
    let (_, ev) = stream_all(s.addr, "/v1/completions", &stopped).await;
    let u = ev
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find(|v| !v["usage"].is_null())
        .expect("a usage chunk");
    assert_eq!(stream_finish(&ev).as_deref(), Some("stop"));
    assert_eq!(cached(&u), cached(&again), "{u}");
}
