//! Tests of the load generator (`serve_load.rs`): configuration checks,
//! prompts and request bodies, usage checks, the tally and its report.

use super::*;
use crate::serve_workload::{prompt_ids, workload_prompt};

fn cfg(requests: usize) -> LoadConfig {
    LoadConfig {
        addr: "127.0.0.1:9".parse().unwrap(),
        model: None,
        concurrency: 4,
        requests,
        prompt_len: 10,
        shared_prefix_len: 0,
        max_tokens: 100,
        ignore_eos: true,
        time_limit: Duration::from_secs(1),
        sample_every: None,
        turns: 1,
        turn_len: 0,
    }
}

#[test]
fn a_shared_prefix_leads_every_prompt_and_the_rest_varies() {
    let c = LoadConfig {
        shared_prefix_len: 6,
        ..cfg(3)
    };
    let (a, b) = (workload_prompt(&c, 0), workload_prompt(&c, 1));
    assert_eq!((a.len(), b.len()), (10, 10));
    assert_eq!(a[..6], b[..6]);
    assert_ne!(a[6..], b[6..]);
    assert_eq!(workload_prompt(&cfg(1), 1), prompt_ids(10, 1));
    let too_long = LoadConfig {
        shared_prefix_len: 11,
        ..cfg(1)
    };
    assert!(check_config(&too_long)
        .unwrap_err()
        .contains("--shared-prefix-len"));
}

#[test]
fn nearest_rank_percentiles() {
    let p = Percentiles::of((1..=100).map(f64::from).collect());
    assert_eq!(
        (p.min, p.p50, p.p90, p.p99, p.max, p.n),
        (1.0, 50.0, 90.0, 99.0, 100.0, 100)
    );
    assert_eq!(Percentiles::of(vec![]).n, 0);
    assert_eq!(Percentiles::of(vec![f64::NAN, 3.0]).p99, 3.0);
}

#[test]
fn only_loopback_targets() {
    assert!(check_target(&"127.0.0.1:8000".parse().unwrap()).is_ok());
    assert!(check_target(&"[::1]:8000".parse().unwrap()).is_ok());
    assert!(check_target(&"10.0.0.1:8000".parse().unwrap()).is_err());
}

#[test]
fn cut_requests_count_their_tokens_and_are_not_failures() {
    let mut t = Tally::default();
    let done = One {
        ttft: Some(5.0),
        itl: vec![1.0; 99],
        e2e: 200.0,
        usage: Some((10, 100)),
        cached: 6,
        chunks: 100,
    };
    let cut = One {
        ttft: Some(7.0),
        itl: vec![1.0; 39],
        e2e: 0.0,
        usage: None,
        cached: 0,
        chunks: 40,
    };
    // Cut before its first token: no prompt, no tokens, still not a failure.
    let cut_early = One::default();
    t.add(0, Ended::Completed(done), 10);
    t.add(1, Ended::Cut(cut), 10);
    t.add(2, Ended::Cut(cut_early), 10);
    t.add(3, Ended::Failed("HTTP 500".into()), 10);
    let r = t.report(&cfg(6), 2.0);
    assert_eq!((r.completed, r.cut, r.failed, r.not_started), (1, 2, 1, 2));
    assert_eq!(r.completion_tokens, 140);
    assert_eq!(r.cut_completion_tokens, 40);
    assert_eq!((r.prompt_tokens, r.cached_tokens), (20, 6));
    assert_eq!(r.output_tokens_per_s, 70.0);
    assert_eq!(r.total_tokens_per_s, 80.0);
    assert_eq!(r.requests_per_s, 0.5);
    assert_eq!(r.ttft_ms.n, 2);
    assert_eq!(
        r.e2e_ms.n, 1,
        "only completed requests have an end-to-end time"
    );
    assert_eq!(r.errors, vec!["request 3: HTTP 500".to_string()]);
    let text = table(&r);
    assert!(
        text.contains("1 completed, 2 cut by the time limit (40 tokens), 2 not started, 1 failed"),
        "{text}"
    );
    assert!(text.contains("70.0 output tok/s"), "{text}");
}

#[test]
fn bad_configurations_are_refused() {
    let mut c = cfg(0);
    assert!(check_config(&c).unwrap_err().contains("--requests"));
    c.requests = 1;
    c.concurrency = 0;
    assert!(check_config(&c).unwrap_err().contains("--concurrency"));
    c.concurrency = MAX_CONCURRENCY + 1;
    assert!(check_config(&c).unwrap_err().contains("--concurrency"));
    c.concurrency = 1;
    c.prompt_len = 0;
    assert!(check_config(&c).unwrap_err().contains("--prompt-len"));
    c.prompt_len = 10;
    c.max_tokens = MAX_PROMPT_LEN + 1;
    assert!(check_config(&c).unwrap_err().contains("--max-tokens"));
    c.max_tokens = 100;
    assert!(check_config(&c).is_ok());
    c.concurrency = 1;
    c.addr = "10.0.0.1:80".parse().unwrap();
    assert!(check_config(&c).unwrap_err().contains("loopback"));
}

#[test]
fn prompts_are_exactly_prompt_len_ids_and_ignore_eos_is_sent() {
    let mut c = cfg(1);
    c.prompt_len = 1024;
    c.model = Some("m".into());
    for i in [0, 1, 77] {
        let b = request_body(&c, i);
        let ids = b["prompt"].as_array().unwrap();
        assert_eq!(ids.len(), 1024);
        assert!(ids.iter().all(|v| (33..127).contains(&v.as_u64().unwrap())));
        assert_eq!(b["ignore_eos"], true);
        assert_eq!(b["max_tokens"], 100);
        assert_eq!(b["model"], "m");
    }
    assert_ne!(request_body(&c, 0)["prompt"], request_body(&c, 1)["prompt"]);
    // No two of a W1-sized run share their first 64-token KV block (the
    // pattern alone repeats every 94 requests).
    let firsts: std::collections::HashSet<Vec<u32>> =
        (0..2000).map(|i| prompt_ids(64, i)).collect();
    assert_eq!(firsts.len(), 2000);
    c.ignore_eos = false;
    assert_eq!(request_body(&c, 0)["ignore_eos"], false);
}

#[test]
fn usage_other_than_the_workload_fails_the_request() {
    let mut c = cfg(1);
    let one = |p, n| One {
        usage: Some((p, n)),
        ..One::default()
    };
    assert!(check_usage(&c, &one(10, 100)).is_ok());
    assert!(
        check_usage(&c, &One::default()).is_ok(),
        "no usage: nothing to check"
    );
    let e = check_usage(&c, &one(11, 100)).unwrap_err();
    assert!(
        e.contains("11 prompt tokens") && e.contains("10 were sent"),
        "{e}"
    );
    let e = check_usage(&c, &one(10, 7)).unwrap_err();
    assert!(
        e.contains("7 tokens") && e.contains("max_tokens was 100"),
        "{e}"
    );
    c.ignore_eos = false;
    assert!(check_usage(&c, &one(10, 7)).is_ok(), "EOS may end it early");
}
