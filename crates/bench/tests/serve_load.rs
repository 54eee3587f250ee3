//! The load generator against a scripted SSE server on loopback: requests the
//! time limit cuts are reported as cut, with the tokens they produced, and
//! throughput counts those tokens; requests that finish count their usage.

use headroom_bench::serve_load::{run, table, LoadConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Serves every connection: reads the request, answers 200 with `tokens`
/// content chunks at once, then (when `stall`) waits 30 s, else sends the
/// usage chunk and `[DONE]`.
async fn scripted_server(tokens: u64, stall: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
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
                let tail = format!(
                    "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":8,\"completion_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n"
                );
                let _ = sock.write_all(tail.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    addr
}

fn config(addr: SocketAddr, requests: usize, limit: Duration) -> LoadConfig {
    LoadConfig {
        addr,
        model: None,
        concurrency: 2,
        requests,
        prompt_len: 8,
        max_tokens: 100,
        time_limit: limit,
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
