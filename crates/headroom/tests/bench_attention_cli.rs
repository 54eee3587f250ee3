//! `headroom bench attention` through the built binary: the flags, the
//! printed table and bars, the JSON evidence, and refusals of bad input.

mod common;

use serde_json::Value;

fn bench(args: &[&str]) -> std::process::Output {
    common::headroom_command()
        .args(["bench", "attention"])
        .args(args)
        .output()
        .expect("run headroom")
}

#[test]
fn cpu_run_prints_the_table_and_writes_the_schema() {
    let json =
        std::env::temp_dir().join(format!("headroom-bench-attn-{}.json", std::process::id()));
    let out = bench(&[
        "--backend",
        "cpu",
        "--head-dim",
        "64",
        "--q-heads",
        "4",
        "--kv-heads",
        "2",
        "--dtype",
        "f16",
        "--lengths",
        "24,40",
        "--history",
        "5",
        "--routes",
        "composed:16,composed:512,fused",
        "--iterations",
        "2",
        "--gemm-baseline",
        "64",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("FLOPs = 4 * q_heads * head_dim"),
        "{stdout}"
    );
    assert!(
        stdout.contains("gemm baseline: square f32 64x64x64"),
        "{stdout}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(v["schema"], "headroom.bench.attention/1");
    assert_eq!(v["hardware"]["backend"], "cpu");
    let samples = v["samples"].as_array().unwrap();
    assert_eq!(samples.len(), 6);
    // composed:512 on 24 query rows ran as one block of 24: the JSON says what ran.
    assert_eq!(samples[1]["route"], "composed");
    assert_eq!(samples[1]["query_block"], 24);
    assert_eq!(samples[2]["route"], "fused");
    assert!(samples[2]["query_block"].is_null());
    for s in samples {
        assert_eq!(
            (
                s["history"].as_u64(),
                s["dtype"].as_str(),
                s["iterations"].as_u64()
            ),
            (Some(5), Some("f16"), Some(2))
        );
        assert!(s["rel_err"].as_f64().unwrap() < 1e-2, "{s}");
    }
}

#[test]
fn bad_input_is_an_error_with_the_reason() {
    for (args, needle) in [
        (
            vec!["--head-dim", "96", "--routes", "fused", "--lengths", "8"],
            "head_dim 96",
        ),
        (
            vec!["--q-heads", "6", "--kv-heads", "4", "--lengths", "8"],
            "not a multiple",
        ),
        (vec!["--routes", "composed:-1"], "composed:-1"),
        (vec!["--dtype", "int8"], "int8"),
    ] {
        let out = bench(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
