//! `bench/gpu/ab_summary.py` (the summary of `bench/gpu/ab_serving.sh`) on
//! reports written here in the schemas `bench ttft` and `bench serve` write:
//! the medians per side, the after / before ratios, and exit 1 when one
//! side lacks a report. Needs `python3` (CI has it: the probe step runs it).

use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/ab_summary.py")
}

fn write(dir: &Path, name: &str, v: Value) {
    std::fs::write(dir.join(name), serde_json::to_string(&v).unwrap()).unwrap();
}

fn ttft_report(medians: &[(u64, f64)]) -> Value {
    json!({
        "schema": "headroom.bench.ttft/2",
        "results": medians
            .iter()
            .map(|&(tokens, ms)| json!({"tokens": tokens, "ttft_ms": [ms], "median_ttft_ms": ms}))
            .collect::<Vec<_>>(),
    })
}

fn serve_report(tok_s: f64) -> Value {
    json!({"schema": "headroom.bench.serve/3", "runs": [{"output_tokens_per_s": tok_s}]})
}

fn run(dir: &Path) -> (i32, String, Value) {
    let out = Command::new("python3")
        .arg(script())
        .arg(dir)
        .output()
        .expect("python3 runs");
    let summary = std::fs::read_to_string(dir.join("ab_summary.json"))
        .map(|s| serde_json::from_str(&s).unwrap())
        .unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        summary,
    )
}

#[test]
fn medians_and_ratios_of_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "ab-ttft-before.json",
        ttft_report(&[(8192, 115.0), (32768, 562.9)]),
    );
    write(
        d,
        "ab-ttft-after.json",
        ttft_report(&[(8192, 112.5), (32768, 563.6)]),
    );
    // Run 10 sorts after run 2 (numeric order, not text order).
    for (side, run, v) in [
        ("before", 1, 5431.3),
        ("after", 1, 5547.1),
        ("before", 2, 5415.2),
        ("after", 2, 5543.1),
        ("before", 10, 5000.0),
        ("after", 10, 5600.0),
    ] {
        write(d, &format!("ab-w1-{side}-{run}.json"), serve_report(v));
    }
    let (code, stdout, s) = run(d);
    assert_eq!(code, 0, "{stdout}");
    let t = &s["ttft_ms"]["8192"];
    assert_eq!(t["before"], 115.0);
    assert!((t["ratio"].as_f64().unwrap() - 112.5 / 115.0).abs() < 1e-12);
    let w = &s["w1_output_tok_s"];
    assert_eq!(w["before_runs"], json!([5431.3, 5415.2, 5000.0]));
    assert_eq!(w["before"], 5415.2);
    assert_eq!(w["after"], 5547.1);
    assert!((w["ratio"].as_f64().unwrap() - 5547.1 / 5415.2).abs() < 1e-12);
    assert!(stdout.contains("after/before 1.024"), "{stdout}");
}

#[test]
fn the_gpu_energy_is_compared_where_both_sides_have_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ttft = |ms: f64, joules: Option<f64>| {
        let mut v = ttft_report(&[(32768, ms)]);
        v["results"][0]["joules_per_run"] = json!(joules);
        v
    };
    write(d, "ab-ttft-before.json", ttft(480.0, Some(320.0)));
    write(d, "ab-ttft-after.json", ttft(470.0, Some(304.0)));
    let serve = |tok_s: f64, j: Option<f64>| {
        let mut v = serve_report(tok_s);
        v["runs"][0]["gpu"] = j.map_or(Value::Null, |j| json!({"joules_per_output_token": j}));
        v
    };
    for (side, run, tok_s, j) in [
        ("before", 1, 5400.0, Some(0.80)),
        ("before", 2, 5420.0, Some(0.78)),
        ("after", 1, 5500.0, Some(0.76)),
        ("after", 2, 5510.0, None),
    ] {
        write(d, &format!("ab-w1-{side}-{run}.json"), serve(tok_s, j));
    }
    let (code, stdout, s) = run(d);
    assert_eq!(code, 0, "{stdout}");
    let t = &s["ttft_joules_per_run"]["32768"];
    assert_eq!(
        (t["before"].as_f64(), t["after"].as_f64()),
        (Some(320.0), Some(304.0))
    );
    assert!((t["ratio"].as_f64().unwrap() - 0.95).abs() < 1e-12);
    // Medians of the runs that have it (the after side's second has none).
    let w = &s["w1_joules_per_output_token"];
    assert!((w["before"].as_f64().unwrap() - 0.79).abs() < 1e-12, "{w}");
    assert_eq!(w["after"].as_f64(), Some(0.76));
    assert!(
        stdout.contains("W1 GPU energy per generated token"),
        "{stdout}"
    );
    // Reports without energy: no energy entries, and still complete.
    let plain = tempfile::tempdir().unwrap();
    write(
        plain.path(),
        "ab-ttft-before.json",
        ttft_report(&[(8192, 115.0)]),
    );
    write(
        plain.path(),
        "ab-ttft-after.json",
        ttft_report(&[(8192, 112.5)]),
    );
    let (code, _, s) = run(plain.path());
    assert_eq!(code, 0);
    assert_eq!(s["ttft_joules_per_run"], json!({}));
    assert_eq!(s["w1_joules_per_output_token"], Value::Null);
}

#[test]
fn a_side_without_its_report_fails() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "ab-w1-before-1.json", serve_report(5400.0));
    write(d, "ab-ttft-before.json", ttft_report(&[(8192, 115.0)]));
    write(d, "ab-ttft-after.json", ttft_report(&[(8192, 112.5)]));
    let (code, _, s) = run(d);
    assert_eq!(code, 1);
    assert_eq!(s["w1_output_tok_s"], Value::Null);
    assert!(s["ttft_ms"]["8192"]["ratio"].is_number());
}

#[test]
fn an_empty_folder_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (code, _, _) = run(dir.path());
    assert_eq!(code, 1);
}
