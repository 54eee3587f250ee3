//! The paged KV pool at start-up, as a process: `generate` prints the pool
//! (blocks, tokens, GiB), the state slots and how many sequences fit at full
//! context; `serve` and `generate` settings that cannot fit the memory
//! budget exit 1 with one line giving the numbers; `serve` without
//! `--max-context` lowers the model's context to the largest that fits.
//! The default prefix-cache snapshot slots shrink on a tight budget.

mod common;

use std::process::Stdio;

/// `generate`'s start-up line on tiny-d256 with a 640-token context, 2
/// running and a budget of `budget_mib`, plus `extra` flags.
fn generate_start_line(budget_mib: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "generate",
        "--synthetic",
        "tiny-d256",
        "--prompt",
        "hello",
        "--max-tokens",
        "3",
        "--max-context",
        "640",
        "--max-running",
        "2",
        "--memory-budget-mib",
        budget_mib,
    ];
    args.extend_from_slice(extra);
    let out = common::headroom(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines()
        .find(|l| l.starts_with("generate on cpu"))
        .unwrap_or_else(|| panic!("no start-up line: {err}"))
        .to_string()
}

#[test]
fn generate_prints_the_pool_slots_and_full_context_sequences() {
    let line = generate_start_line("4096", &[]);
    // 2 slots at 640 tokens: 2 x 10 blocks (the budget holds more).
    for want in [
        "paged KV cache",
        "up to 2 running",
        "KV pool 20 blocks of 64 tokens = 1280 tokens",
        "2 state slots",
        "2 sequences fit at full context (640 tokens)",
    ] {
        assert!(line.contains(want), "{want}: {line}");
    }
}

#[test]
fn settings_that_cannot_fit_exit_1_with_one_line_of_numbers() {
    for cmd in [
        vec!["serve", "--port", "0"],
        vec!["generate", "--prompt", "hello", "--max-tokens", "2"],
    ] {
        let mut args = cmd.clone();
        args.extend([
            "--synthetic",
            "tiny-d256",
            "--max-running",
            "4",
            "--memory-budget-mib",
            "1",
        ]);
        let err = common::headroom_fails(&args);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let error: Vec<&&str> = lines.iter().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(error.len(), 1, "{args:?}: {err}");
        let e = error[0];
        assert!(
            e.contains("GiB") && (e.contains("cannot fit") || e.contains("transients")),
            "{args:?}: {e}"
        );
    }
}

#[test]
fn a_context_that_cannot_fit_names_the_largest_that_does_and_that_one_runs() {
    let run = |context: &str| {
        vec![
            "generate".to_string(),
            "--synthetic".into(),
            "tiny-d256".into(),
            "--prompt".into(),
            "hello".into(),
            "--max-tokens".into(),
            "2".into(),
            "--max-running".into(),
            "1".into(),
            "--memory-budget-mib".into(),
            "200".into(),
            "--max-context".into(),
            context.to_string(),
        ]
    };
    let args = run("32768");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = common::headroom_fails(&args);
    let line = err
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    let fits: usize = line
        .split("the largest --max-context that fits is ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fitting context named: {line}"));
    assert!(
        fits > 0 && fits < 32768 && fits.is_multiple_of(64),
        "{line}"
    );
    // That context starts; one block more does not.
    let ok = run(&fits.to_string());
    let ok: Vec<&str> = ok.iter().map(String::as_str).collect();
    let out = common::headroom(&ok);
    let started = String::from_utf8_lossy(&out.stderr);
    assert!(
        started.contains(&format!("1 sequences fit at full context ({fits} tokens)")),
        "{started}"
    );
    let more = run(&(fits + 64).to_string());
    let more: Vec<&str> = more.iter().map(String::as_str).collect();
    common::headroom_fails(&more);
}

/// The number after `the largest --max-context that fits is ` in `err`.
fn named_fit(err: &str) -> usize {
    err.lines()
        .find(|l| l.starts_with("error:"))
        .and_then(|l| l.split("the largest --max-context that fits is ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fitting context named: {err}"))
}

/// tiny-d256's own context (32,768) does not fit one slot in 200 MiB:
/// asked for with `--max-context`, `serve` exits 1 naming the largest that
/// fits; not asked for, it starts with that context, says so on stderr,
/// reports it on `/v1/models` and refuses a request past it, naming it.
#[test]
fn serve_without_max_context_lowers_the_models_context_to_fit_and_with_it_exits_1() {
    let base = [
        "serve",
        "--synthetic",
        "tiny-d256",
        "--port",
        "0",
        "--max-running",
        "1",
        "--memory-budget-mib",
        "200",
    ];
    let mut exact = base.to_vec();
    exact.extend(["--max-context", "32768"]);
    let fits = named_fit(&common::headroom_fails(&exact));
    assert!(
        fits > 0 && fits < 32768 && fits.is_multiple_of(64),
        "{fits}"
    );

    let mut child = common::headroom_command()
        .args(base)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = common::listening_addr(&mut child);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (models, long) = rt.block_on(async {
        use headroom_server::client;
        let models = client::request(addr, "GET", "/v1/models", None)
            .await
            .unwrap();
        let body = serde_json::json!({
            "prompt": "a".repeat(fits - 8),
            "max_tokens": 16,
            "temperature": 0,
        });
        let long = client::post_json(addr, "/v1/completions", &body)
            .await
            .unwrap();
        (models, long)
    });
    let stderr = common::stop_server(child);
    assert_eq!(
        models.json().unwrap()["data"][0]["max_model_len"],
        fits,
        "{stderr}"
    );
    assert_eq!(long.status, 400, "{}", long.text());
    assert!(
        long.text()
            .contains(&format!("model's context of {fits} tokens")),
        "{}",
        long.text()
    );
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(&format!("max_context lowered from 32768 to {fits} tokens"))),
        "{stderr}"
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("serve on cpu"))
        .unwrap_or_else(|| panic!("no start-up line: {stderr}"));
    for want in [
        format!("context {fits} tokens"),
        format!("1 sequences fit at full context ({fits} tokens, lowered from 32768 to fit)"),
    ] {
        assert!(line.contains(&want), "{want}: {line}");
    }
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

/// The snapshot count on `generate`'s start-up line at 190 MiB with `extra` flags.
fn snapshot_slots_at_190_mib(extra: &[&str]) -> usize {
    let line = generate_start_line("190", extra);
    let before = line
        .split(" prefix-cache snapshot slots")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .unwrap_or_else(|| panic!("no snapshot slots: {line}"));
    before
        .parse()
        .unwrap_or_else(|_| panic!("{before}: {line}"))
}

#[test]
fn on_a_tight_budget_the_default_snapshot_slots_shrink_and_a_given_count_stays() {
    // 190 MiB leaves ~16 MiB after tiny-d256's largest step: a sixteenth of
    // it holds fewer than the default ceiling of 16 snapshots.
    let auto = snapshot_slots_at_190_mib(&[]);
    assert!((1..16).contains(&auto), "{auto}");
    assert_eq!(
        snapshot_slots_at_190_mib(&["--prefix-cache-state-slots", "16"]),
        16
    );
}
