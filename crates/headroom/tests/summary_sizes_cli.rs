//! Summaries print the real size of the weights (issue 24 item 10): the CPU
//! backend counts every matrix it holds, so `generate`'s `weight_bytes` is
//! the model's size (not a few KiB of norm vectors), and a tensor-parallel
//! run's "weights per rank" shows each rank's share in a unit that reads.

mod common;

use common::{headroom_command, TempDir};
use headroom_model::ModelConfig;

fn summary(tmp: &TempDir, tag: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let out = tmp.0.join(format!("{tag}.jsonl"));
    let mut args = vec![
        "generate",
        "--synthetic",
        "tiny-d64",
        "--backend",
        "cpu",
        "--prompt",
        "hello",
        "--max-tokens",
        "2",
        "--json",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = headroom_command()
        .args(&args)
        .env_remove("HEADROOM_TP")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{args:?}: {stderr}");
    let text = std::fs::read_to_string(&out).unwrap();
    let last = text.lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last).unwrap();
    (v["summary"].clone(), stderr)
}

#[test]
fn cpu_weight_bytes_are_the_models_size_and_tp_ranks_are_readable() {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    // bf16 storage: the matrices alone are about this size.
    let model = cfg.weight_bytes().unwrap();
    let tmp = TempDir::new("summary-sizes");
    let (s1, _) = summary(&tmp, "tp1", &[]);
    let whole = s1["weight_bytes"].as_u64().unwrap();
    assert!(
        whole >= model / 2 && whole <= model * 3,
        "weight_bytes {whole} for a model of {model} bytes"
    );
    let (s2, stderr) = summary(&tmp, "tp2", &["--tensor-parallel", "2"]);
    for r in s2["weight_bytes_per_rank"].as_array().unwrap() {
        let b = r.as_u64().unwrap();
        assert!(b >= whole / 4 && b < whole, "a rank holds {b} of {whole}");
    }
    let line = stderr
        .lines()
        .find(|l| l.contains("weights per rank"))
        .unwrap_or_else(|| panic!("no weights line in {stderr}"));
    assert!(!line.contains("0.00"), "{line}");
    assert!(line.contains("MiB"), "{line}");
}
