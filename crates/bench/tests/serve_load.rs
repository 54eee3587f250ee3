//! The load generator against a scripted SSE server on loopback: requests the
//! time limit cuts are reported as cut, with the tokens they produced, and
//! throughput counts those tokens; requests that finish count their usage;
//! every request sends exactly `prompt_len` ids and `ignore_eos`; with
//! `ignore_eos` a request that ends short fails; a concurrency sweep has one
//! entry per level and its plot one point per level.

use headroom_bench::serve_load::{run, table};
use headroom_bench::serve_sweep;
use headroom_bench::serve_workload::LoadConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Request bodies the scripted server received.
type Bodies = Arc<Mutex<Vec<Value>>>;

async fn scripted_server(tokens: u64, stall: bool) -> SocketAddr {
    scripted_server_recording(tokens, stall).await.0
}

/// Serves every connection: reads the request (keeping its JSON body),
/// answers 200 with `tokens` content chunks at once, then (when `stall`)
/// waits 30 s, else sends the usage chunk (prompt tokens: the length of the
/// body's `prompt`) and `[DONE]`.
async fn scripted_server_recording(tokens: u64, stall: bool) -> (SocketAddr, Bodies) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = Bodies::default();
    let seen = bodies.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                let mut got = Vec::new();
                // The head, then the body by Content-Length.
                loop {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= end + 4 + len {
                            if len == 0 {
                                return; // a GET (the pool sampler): no answer
                            }
                            let body: Value =
                                serde_json::from_slice(&got[end + 4..end + 4 + len]).unwrap();
                            seen.lock().unwrap().push(body);
                            break;
                        }
                    }
                }
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                );
                for _ in 0..tokens {
                    out.push_str("data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n");
                }
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.flush().await;
                if stall {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    return;
                }
                let prompt = seen.lock().unwrap().last().unwrap()["prompt"]
                    .as_array()
                    .unwrap()
                    .len();
                let tail = format!(
                    "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n"
                );
                let _ = sock.write_all(tail.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, bodies)
}

fn config(addr: SocketAddr, requests: usize, limit: Duration) -> LoadConfig {
    LoadConfig {
        addr,
        model: None,
        concurrency: 2,
        requests,
        prompt_len: 8,
        shared_prefix_len: 0,
        max_tokens: 100,
        ignore_eos: false,
        time_limit: limit,
        sample_every: None,
        turns: 1,
        turn_len: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cut_by_the_time_limit_report_the_tokens_they_produced() {
    let addr = scripted_server(3, true).await;
    let r = run(config(addr, 5, Duration::from_millis(600)))
        .await
        .unwrap();
    // Two clients each start one request; both stall after 3 tokens and are
    // cut at the limit; the other three never start.
    assert_eq!(
        (r.completed, r.cut, r.not_started, r.failed),
        (0, 2, 3, 0),
        "{r:?}"
    );
    assert_eq!(r.completion_tokens, 6);
    assert_eq!(r.cut_completion_tokens, 6);
    assert_eq!(r.prompt_tokens, 16);
    assert_eq!(r.ttft_ms.n, 2);
    assert!(r.output_tokens_per_s > 0.0, "{r:?}");
    assert!(r.duration_s >= 0.6 && r.duration_s < 5.0, "{r:?}");
    let text = table(&r);
    assert!(
        text.contains("0 completed, 2 cut by the time limit (6 tokens), 3 not started, 0 failed"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_requests_count_the_usage_the_server_reports() {
    let addr = scripted_server(4, false).await;
    let r = run(config(addr, 6, Duration::from_secs(30))).await.unwrap();
    assert_eq!(
        (r.completed, r.cut, r.not_started, r.failed),
        (6, 0, 0, 0),
        "{r:?}"
    );
    assert_eq!((r.prompt_tokens, r.completion_tokens), (48, 24));
    assert_eq!(r.itl_ms.n, 6 * 3);
    assert_eq!(r.e2e_ms.n, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_eos_requests_send_exact_prompts_and_fail_when_they_end_short() {
    let (addr, bodies) = scripted_server_recording(4, false).await;
    let mut c = config(addr, 3, Duration::from_secs(30));
    c.prompt_len = 1000;
    c.max_tokens = 4;
    c.ignore_eos = true;
    let r = run(c.clone()).await.unwrap();
    assert_eq!((r.completed, r.failed), (3, 0), "{r:?}");
    assert_eq!((r.prompt_tokens, r.completion_tokens), (3000, 12));
    {
        let got = bodies.lock().unwrap();
        assert_eq!(got.len(), 3);
        for b in got.iter() {
            assert_eq!(b["prompt"].as_array().unwrap().len(), 1000, "{b}");
            assert_eq!(
                (b["ignore_eos"].as_bool(), b["max_tokens"].as_u64()),
                (Some(true), Some(4))
            );
        }
    }
    // The server stops after 4 of 5 tokens: with ignore_eos that is not the workload.
    c.max_tokens = 5;
    let r = run(c.clone()).await.unwrap();
    assert_eq!((r.completed, r.failed), (0, 3), "{r:?}");
    assert!(
        r.errors[0].contains("4 tokens generated with ignore_eos"),
        "{:?}",
        r.errors
    );
    // Without it, ending early is the model's choice.
    c.ignore_eos = false;
    let r = run(c).await.unwrap();
    assert_eq!((r.completed, r.failed), (3, 0), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_runs_every_level_and_plots_one_point_per_level() {
    let (addr, bodies) = scripted_server_recording(4, false).await;
    let mut c = config(addr, 6, Duration::from_secs(30));
    c.max_tokens = 4;
    c.ignore_eos = true;
    let levels = [1, 2, 4];
    let r = serve_sweep::run(c, &levels).await.unwrap();
    assert_eq!(bodies.lock().unwrap().len(), 18);
    assert_eq!(r.concurrency, levels);
    assert_eq!(r.failed(), 0);
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["schema"], "headroom.bench.serve/3");
    assert_eq!(
        (v["ignore_eos"].as_bool(), v["prompt_len"].as_u64()),
        (Some(true), Some(8))
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for (run, &level) in runs.iter().zip(&levels) {
        assert_eq!(run["concurrency"], level);
        assert_eq!(
            (
                run["completed"].as_u64(),
                run["cut"].as_u64(),
                run["failed"].as_u64()
            ),
            (Some(6), Some(0), Some(0))
        );
        assert_eq!(run["completion_tokens"], 24);
        assert!(run["output_tokens_per_s"].as_f64().unwrap() > 0.0);
        assert!(
            run["total_tokens_per_s"].as_f64().unwrap()
                > run["output_tokens_per_s"].as_f64().unwrap()
        );
        for m in ["ttft_ms", "itl_ms"] {
            for p in ["p50", "p90", "p99"] {
                assert!(run[m][p].as_f64().unwrap() >= 0.0, "{m}.{p}");
            }
        }
        assert_eq!(run["itl_ms"]["n"], 6 * 3);
    }
    let text = serve_sweep::table(&r);
    assert!(
        text.contains("out tok/s") && text.contains("(EOS ignored)"),
        "{text}"
    );
    let svg = serve_sweep::throughput_svg(&r);
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
    assert_eq!(svg.matches("<polyline").count(), 1);
    for level in levels {
        assert!(
            svg.contains(&format!(">{level}</text>")),
            "an x tick per level: {svg}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_level_is_refused_before_any_request() {
    let (addr, bodies) = scripted_server_recording(4, false).await;
    let c = config(addr, 6, Duration::from_secs(30));
    let e = serve_sweep::run(c.clone(), &[2, 2000]).await.unwrap_err();
    assert!(e.contains("--concurrency"), "{e}");
    let e = serve_sweep::run(c, &[]).await.unwrap_err();
    assert!(e.contains("--concurrency"), "{e}");
    assert!(bodies.lock().unwrap().is_empty());
}

/// A `headroom-server` over the scripted fake generator (it has `/metrics`).
async fn fake_server(token_delay: Duration) -> SocketAddr {
    fake_server_with_gpu(token_delay, None).await
}

/// [`fake_server`] whose `/metrics` shows `gpu`'s lines.
async fn fake_server_with_gpu(
    token_delay: Duration,
    gpu: Option<headroom_server::gpu_metrics::GpuMetrics>,
) -> SocketAddr {
    use headroom_model::tokenizer::TextCodec;
    use headroom_server::fake::{FakeConfig, FakeGenerator};
    use headroom_server::{AppState, ChatTemplate, ServerConfig};
    let fake = FakeGenerator::new(FakeConfig {
        token_delay,
        ..FakeConfig::default()
    });
    let mut state = AppState::new(
        Arc::new(fake),
        TextCodec::Bytes,
        ChatTemplate::plain(),
        ServerConfig::new("fake", 512),
    );
    if let Some(g) = gpu {
        state.metrics.set_gpu(g);
    }
    let state = Arc::new(state);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(headroom_server::serve(
        listener,
        state,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_use_is_sampled_from_the_servers_metrics_over_the_run() {
    let addr = fake_server(Duration::from_millis(5)).await;
    let mut c = config(addr, 8, Duration::from_secs(30));
    c.concurrency = 4;
    c.max_tokens = 20;
    c.ignore_eos = true;
    c.sample_every = Some(Duration::from_millis(10));
    let r = run(c.clone()).await.unwrap();
    assert_eq!((r.completed, r.failed), (8, 0), "{:?}", r.errors);
    assert_eq!(r.completion_tokens, 8 * 20);
    // 2 rounds of 20 tokens at 5 ms: ~200 ms, sampled every 10 ms.
    assert!(r.pool.len() >= 5, "{:?}", r.pool);
    assert!(r.pool.windows(2).all(|w| w[0].t_s < w[1].t_s));
    assert!(r.pool.iter().all(|s| s.t_s <= r.duration_s + 0.1));
    assert!(
        r.pool.iter().any(|s| s.running > 0 && s.kv_blocks_used > 0),
        "{:?}",
        r.pool
    );
    assert!(r.pool.iter().all(|s| s.running <= 4));
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["pool"][0]["kv_blocks_used"].is_u64(), "{v}");
    // The fake generator never preempts; its pool is idle at the end.
    assert_eq!(r.preemptions, Some(0));
    assert_eq!(r.pool_end.as_ref().map(|p| p.running), Some(0));
    // Not asked: no samples.
    c.sample_every = None;
    assert!(run(c).await.unwrap().pool.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_gpu_is_sampled_and_its_energy_divided_by_the_tokens() {
    use headroom_hardware::ClockSample;
    use headroom_server::gpu_metrics::{GpuMetrics, GpuReading};
    use std::sync::atomic::AtomicU64;
    // A GPU whose energy counter gains 1 J a reading, at 1,700 MHz and
    // 650 W, held for power at every other reading.
    let reads = Arc::new(AtomicU64::new(0));
    let seen = reads.clone();
    let gpu = GpuMetrics::new(Box::new(move || {
        let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(GpuReading {
            sample: ClockSample {
                sm_mhz: 1700,
                power_mw: 650_000,
                reasons: if n.is_multiple_of(2) { 0x4 } else { 0 },
                energy_mj: Some(5_000 + 1_000 * n),
            },
            power_limit_mw: 700_000,
        })
    }));
    let addr = fake_server_with_gpu(Duration::from_millis(5), Some(gpu)).await;
    let mut c = config(addr, 8, Duration::from_secs(30));
    c.concurrency = 4;
    c.max_tokens = 20;
    c.ignore_eos = true;
    c.sample_every = Some(Duration::from_millis(10));
    let r = run(c).await.unwrap();
    assert_eq!((r.completed, r.failed), (8, 0), "{:?}", r.errors);
    let g = r.gpu.as_ref().expect("the server shows its GPU");
    // Every pool sample carried the gauges; the counter was read once
    // before the run, once a sample and once after: energy = 1 J a reading
    // between the first and the last.
    assert!(g.samples >= 5 && g.samples == r.pool.len(), "{g:?}");
    assert!(r.pool.iter().all(|s| s.gpu.is_some()));
    let readings = reads.load(std::sync::atomic::Ordering::SeqCst) as f64;
    assert_eq!(g.energy_j, Some(readings - 1.0), "{g:?}");
    let j = g.energy_j.unwrap();
    assert_eq!(g.joules_per_output_token, Some(j / 160.0));
    assert_eq!(g.sm_clock_mhz_mean, Some(1700.0));
    assert_eq!(g.power_w_mean, Some(650.0));
    assert_eq!(g.power_limit_w, Some(700.0));
    let share = g.power_capped_share.unwrap();
    assert!(share > 0.2 && share < 0.8, "{share}");
    let text = table(&r);
    assert!(text.contains("J per generated token"), "{text}");
    let v = serde_json::to_value(&r).unwrap();
    assert!(v["gpu"]["joules_per_token"].is_f64(), "{v}");
    assert!(v["pool"][0]["gpu"]["sm_clock_mhz"].is_f64(), "{v}");
    // Without the lines: no GPU in the report, none in the samples' JSON.
    let plain = fake_server(Duration::from_millis(1)).await;
    let mut c = config(plain, 2, Duration::from_secs(30));
    c.sample_every = Some(Duration::from_millis(5));
    let r = run(c).await.unwrap();
    assert_eq!(r.gpu, None);
    let v = serde_json::to_value(&r).unwrap();
    assert!(
        v["gpu"].is_null() && v["pool"][0].get("gpu").is_none(),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_metrics_gives_an_empty_pool_series() {
    let addr = scripted_server(2, false).await;
    let mut c = config(addr, 2, Duration::from_secs(30));
    c.sample_every = Some(Duration::from_millis(5));
    let r = run(c).await.unwrap();
    assert_eq!((r.completed, r.failed), (2, 0), "{:?}", r.errors);
    assert!(r.pool.is_empty(), "{:?}", r.pool);
}
