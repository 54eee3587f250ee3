//! `bench serve --turns` and the preemption count against a scripted server
//! on loopback that plays a prefix cache (each answer reports as cached the
//! longest 64-token-aligned prefix its prompt shares with an earlier
//! prompt) and a `/metrics` whose preemption counter grows by 3 per read:
//! every conversation sends its turns in order, each resending the previous
//! prompt plus `turn_len` ids; the report gives per-turn TTFT and cached
//! tokens, and the preemptions between the reads before and after the run.

use headroom_bench::serve_load::{run, table};
use headroom_bench::serve_sweep;
use headroom_bench::serve_workload::LoadConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Prompts the server received, in arrival order.
type Prompts = Arc<Mutex<Vec<Vec<u64>>>>;

/// Reads one request: its first line and its body.
async fn read_request(sock: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = vec![0u8; 64 << 10];
    let mut got = Vec::new();
    loop {
        let n = sock.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let len = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
            })
            .unwrap_or(0);
        if got.len() >= end + 4 + len {
            let line = text.lines().next().unwrap_or("").to_string();
            return Some((line, got[end + 4..end + 4 + len].to_vec()));
        }
    }
}

/// The scripted server (see the module doc): `tokens` content chunks per
/// completion; `metrics` false answers 404 to `/metrics`.
async fn server(tokens: u64, metrics: bool) -> (SocketAddr, Prompts, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let prompts = Prompts::default();
    let reads = Arc::new(AtomicU64::new(0));
    let (seen, counted) = (prompts.clone(), reads.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let (seen, counted) = (seen.clone(), counted.clone());
            tokio::spawn(async move {
                let Some((line, body)) = read_request(&mut sock).await else {
                    return;
                };
                if line.starts_with("GET /metrics") {
                    let out = if metrics {
                        let n = 5 + 3 * counted.fetch_add(1, Ordering::SeqCst);
                        let text = format!(
                            "headroom_preemptions_total {n}\nheadroom_requests_running 0\n\
                             headroom_requests_waiting 0\nheadroom_kv_blocks_used 7\n\
                             headroom_kv_blocks_free 93\n"
                        );
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                            text.len()
                        )
                    } else {
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_string()
                    };
                    let _ = sock.write_all(out.as_bytes()).await;
                    let _ = sock.shutdown().await;
                    return;
                }
                let v: Value = serde_json::from_slice(&body).unwrap();
                let prompt: Vec<u64> = v["prompt"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_u64().unwrap())
                    .collect();
                let cached = {
                    let mut all = seen.lock().unwrap();
                    let best = all
                        .iter()
                        .map(|p: &Vec<u64>| {
                            p.iter().zip(&prompt).take_while(|(a, b)| a == b).count()
                        })
                        .max()
                        .unwrap_or(0);
                    all.push(prompt.clone());
                    best / 64 * 64
                };
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                );
                for _ in 0..tokens {
                    out.push_str("data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n");
                }
                out.push_str(&format!(
                    "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":{tokens},\
                     \"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}}}}}\n\ndata: [DONE]\n\n",
                    prompt.len()
                ));
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (addr, prompts, reads)
}

fn config(addr: SocketAddr, conversations: usize, turns: usize) -> LoadConfig {
    LoadConfig {
        addr,
        model: None,
        concurrency: 2,
        requests: conversations,
        prompt_len: 128,
        shared_prefix_len: 0,
        max_tokens: 3,
        ignore_eos: true,
        time_limit: Duration::from_secs(30),
        sample_every: None,
        turns,
        turn_len: 64,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_resend_each_prompt_and_report_per_turn() {
    let (addr, prompts, reads) = server(3, true).await;
    let r = run(config(addr, 3, 3)).await.unwrap();
    assert_eq!(
        (r.completed, r.failed, r.not_started),
        (9, 0, 0),
        "{:?}",
        r.errors
    );
    assert_eq!(r.turns, 3);
    // Turn t's prompt: 128 + 64 (t - 1) ids, the previous turn's prompt first.
    let got = prompts.lock().unwrap().clone();
    assert_eq!(got.len(), 9);
    for p in &got {
        assert!([128, 192, 256].contains(&p.len()), "{}", p.len());
        if p.len() > 128 {
            let shorter = p.len() - 64;
            let earlier = got
                .iter()
                .position(|q| q.len() == shorter && q[..] == p[..shorter]);
            let me = got.iter().position(|q| q == p).unwrap();
            assert!(
                earlier.is_some_and(|e| e < me),
                "the previous turn came first"
            );
        }
    }
    assert_eq!(r.per_turn.len(), 3);
    let by_turn: Vec<(usize, usize, u64, u64)> = r
        .per_turn
        .iter()
        .map(|t| (t.turn, t.completed, t.prompt_tokens, t.cached_tokens))
        .collect();
    assert_eq!(
        by_turn,
        vec![(1, 3, 384, 0), (2, 3, 576, 384), (3, 3, 768, 576)],
        "each later turn finds the previous prompt cached"
    );
    assert!(r
        .per_turn
        .iter()
        .all(|t| t.ttft_ms.n == 3 && t.ttft_ms.p50 >= 0.0));
    assert_eq!((r.prompt_tokens, r.cached_tokens), (1728, 960));
    // Two /metrics reads (before and after; no sampling): 5, then 8.
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert_eq!(r.preemptions, Some(3));
    assert_eq!(r.pool_end.as_ref().map(|p| p.kv_blocks_used), Some(7));
    let text = table(&r);
    assert!(
        text.contains("ttft p50") && text.contains("cached tokens"),
        "{text}"
    );
    assert!(
        text.contains("server: 3 preemptions during the run"),
        "{text}"
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["preemptions"], 3);
    assert_eq!(v["per_turn"][1]["cached_tokens"], 384);
    assert!(v["per_turn"][2]["ttft_ms"]["p50"].is_number(), "{v}");

    // The sweep's workload names the turns.
    let s = serve_sweep::run(config(addr, 2, 2), &[1]).await.unwrap();
    let v = serde_json::to_value(&s).unwrap();
    assert_eq!(
        (v["turns"].as_u64(), v["turn_len"].as_u64()),
        (Some(2), Some(64))
    );
    assert!(serve_sweep::table(&s).contains("conversations of 2 turns"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_turn_ends_its_conversation_and_no_metrics_means_no_count() {
    // Every answer has 3 tokens; asking for 4 with ignore_eos fails turn 1,
    // so turns 2 and 3 of each conversation are never sent.
    let (addr, prompts, _) = server(3, false).await;
    let mut c = config(addr, 2, 3);
    c.max_tokens = 4;
    let r = run(c).await.unwrap();
    assert_eq!(
        (r.completed, r.failed, r.not_started),
        (0, 2, 4),
        "{:?}",
        r.errors
    );
    assert_eq!(prompts.lock().unwrap().len(), 2);
    assert_eq!((r.preemptions, r.pool_end.is_none()), (None, true));
    assert!(!table(&r).contains("preemptions"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_turn_settings_are_refused_before_any_request() {
    let (addr, prompts, _) = server(3, true).await;
    let e = run(config(addr, 1, 0)).await.unwrap_err();
    assert!(e.contains("--turns"), "{e}");
    let mut c = config(addr, 1, 3);
    c.turn_len = 1 << 20;
    let e = run(c).await.unwrap_err();
    assert!(e.contains("--turn-len"), "{e}");
    assert!(prompts.lock().unwrap().is_empty());
}
