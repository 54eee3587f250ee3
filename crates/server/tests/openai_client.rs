//! The official `openai` Python client against the server over the
//! scripted fake: runs tests/openai/check_client.py (tools streamed and not,
//! parallel calls, a tool result sent back, reasoning, `tool_choice: none`;
//! logprobs / top_logprobs, n, seed, penalties, echo, cached_tokens and their limits).
//! A second test runs tests/openai/check_client_engine.py against the real
//! engine on the CPU tiny model (shapes, tools rendered, forcing, history,
//! reasoning, logprobs, n).
//! Needs python3 with `openai` installed (`pip install openai`); the
//! interpreter is `$HEADROOM_PYTHON`, else `python3`.

mod common;

use common::*;
use headroom_server::fake::{FakeConfig, FakeGenerator};
use headroom_server::{ChatTemplate, ServerConfig};
use std::sync::Arc;
use std::time::Duration;

const SCRIPT: &str = "Two tools are needed.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=add>\n<parameter=a>\n1.5\n</parameter>\n<parameter=b>\n[2, 3]\n</parameter>\n</function>\n</tool_call>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python3 with the `openai` package (pip install openai); run with --ignored"]
async fn the_openai_python_client_handles_tools_and_reasoning() {
    let f = FakeConfig {
        max_context: 1 << 16,
        token_delay: Duration::ZERO,
        script: Some(SCRIPT.bytes().map(u32::from).collect()),
        ..FakeConfig::default()
    };
    let s = start_with(
        Arc::new(FakeGenerator::new(f)),
        ServerConfig::new("fake", 512),
        ChatTemplate::qwen_shaped(),
        Duration::from_secs(5),
    )
    .await;
    run_client_check("check_client.py", s.addr, "fake").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs python3 with the `openai` package (pip install openai); run with --ignored"]
async fn the_openai_python_client_runs_against_the_real_engine() {
    use headroom_cpu::CpuBackend;
    use headroom_engine::EngineConfig;
    use headroom_model::{ModelConfig, Qwen35Model, Weights};
    let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
    let m = Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
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
        ServerConfig::new("tiny-d256", cfg.vocab_size),
        ChatTemplate::qwen_shaped(),
        Duration::from_secs(5),
    )
    .await;
    run_client_check("check_client_engine.py", s.addr, "tiny-d256").await;
}

/// Runs tests/openai/`script` with the official client against the server at
/// `addr` as `model`; it must exit 0 and print "all checks passed".
async fn run_client_check(script: &str, addr: std::net::SocketAddr, model: &str) {
    let script = format!("{}/tests/openai/{script}", env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("HEADROOM_PYTHON").unwrap_or_else(|_| "python3".into());
    let (url, model) = (format!("http://{addr}/v1"), model.to_string());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .args([script.as_str(), "--base-url", &url, "--model", &model])
            .output()
    })
    .await
    .unwrap()
    .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all checks passed"), "{text}");
}
