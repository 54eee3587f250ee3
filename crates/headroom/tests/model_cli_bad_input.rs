//! Bad input through the `headroom` binary: each is a clear error on stderr,
//! a non-zero exit code, and no panic.

mod common;

use common::{headroom_fails, write_checkpoint, TempDir};
use headroom_model::{ModelConfig, Tensor, Weights};
use std::path::Path;

/// Writes the tiny-d64 synthetic model (weights seed 0) as a checkpoint, after `edit`.
fn write_tiny_checkpoint(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Tensor)>)) {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    write_checkpoint(dir, &cfg, &Weights::synthetic(&cfg, 0), edit);
}

/// Runs `headroom logits` on `dir` with a small valid id list; returns stderr after
/// checking the exit code is non-zero and nothing panicked.
fn logits_fails(model: &[&str], ids: &str) -> String {
    let tmp = TempDir::new("ids");
    let ids_path = tmp.0.join("ids.json");
    std::fs::write(&ids_path, ids).unwrap();
    let out_path = tmp.0.join("out.safetensors");
    let mut args = vec!["logits"];
    args.extend_from_slice(model);
    args.extend(["--ids", ids_path.to_str().unwrap()]);
    args.extend(["--out", out_path.to_str().unwrap()]);
    let stderr = headroom_fails(&args);
    assert!(
        !tmp.0.join("out.safetensors").exists(),
        "no output on failure"
    );
    stderr
}

fn model_dir_fails(
    edit_config: impl FnOnce(&Path),
    edit: impl FnOnce(&mut Vec<(String, Tensor)>),
) -> String {
    let dir = TempDir::new("model");
    write_tiny_checkpoint(&dir.0, edit);
    edit_config(&dir.0);
    logits_fails(&["--model", dir.0.to_str().unwrap()], "[1, 2, 3]")
}

#[test]
fn malformed_config_json() {
    let err = model_dir_fails(
        |d| {
            std::fs::write(
                d.join("config.json"),
                "{\"model_type\": \"qwen3_5_moe_text\",",
            )
            .unwrap()
        },
        |_| {},
    );
    assert!(err.contains("malformed config JSON"), "{err}");
}

#[test]
fn unknown_model_type() {
    let err = model_dir_fails(
        |d| {
            let text = std::fs::read_to_string(d.join("config.json")).unwrap();
            std::fs::write(
                d.join("config.json"),
                text.replace("qwen3_5_moe_text", "llama"),
            )
            .unwrap();
        },
        |_| {},
    );
    assert!(err.contains("unknown model_type `llama`"), "{err}");
}

#[test]
fn missing_config_field() {
    let err = model_dir_fails(
        |d| {
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(d.join("config.json")).unwrap())
                    .unwrap();
            v.as_object_mut().unwrap().remove("num_key_value_heads");
            std::fs::write(d.join("config.json"), v.to_string()).unwrap();
        },
        |_| {},
    );
    assert!(
        err.contains("missing the required field `num_key_value_heads`"),
        "{err}"
    );
}

#[test]
fn missing_tensor() {
    let err = model_dir_fails(
        |_| {},
        |t| t.retain(|(n, _)| n != "model.layers.3.self_attn.q_norm.weight"),
    );
    assert!(
        err.contains("missing tensor `layers.3.self_attn.q_norm.weight`"),
        "{err}"
    );
    assert!(err.contains("[64]"), "expected shape named: {err}");
}

#[test]
fn wrong_shape() {
    let err = model_dir_fails(
        |_| {},
        |t| {
            let (_, x) = t
                .iter_mut()
                .find(|(n, _)| n == "model.layers.0.linear_attn.out_proj.weight")
                .unwrap();
            *x = Tensor::from_f32(vec![128, 64], vec![0.0; 128 * 64]);
        },
    );
    assert!(
        err.contains("layers.0.linear_attn.out_proj.weight")
            && err.contains("[128, 64]")
            && err.contains("[128, 128]"),
        "{err}"
    );
}

#[test]
fn truncated_safetensors() {
    let err = model_dir_fails(
        |d| {
            let p = d.join("model.safetensors");
            let bytes = std::fs::read(&p).unwrap();
            std::fs::write(&p, &bytes[..bytes.len() / 2]).unwrap();
        },
        |_| {},
    );
    // A short file is an interrupted copy or a full disk, not another format.
    assert!(
        err.contains("model.safetensors") && err.contains("truncated"),
        "{err}"
    );
    assert!(!err.contains("not a valid safetensors file"), "{err}");
}

#[test]
fn token_id_out_of_vocab() {
    let err = logits_fails(&["--synthetic", "tiny-d64"], "[1, 2, 512]");
    assert!(
        err.contains("token id 512 at position 2 is out of range (vocab_size 512)"),
        "{err}"
    );
}

#[test]
fn malformed_ids_and_unknown_synthetic() {
    let err = logits_fails(&["--synthetic", "tiny-d64"], "[1, -2]");
    assert!(
        err.contains("JSON array of non-negative token ids"),
        "{err}"
    );
    let err = logits_fails(&["--synthetic", "tiny-d64"], "[]");
    assert!(err.contains("no token ids"), "{err}");
    let err = logits_fails(&["--synthetic", "tiny-d99"], "[1]");
    assert!(err.contains("unknown synthetic model `tiny-d99`"), "{err}");
}

#[test]
fn generate_rejects_bad_sampling_options() {
    for args in [
        ["--temperature", "-1"],
        ["--top-p", "0"],
        ["--top-p", "1.5"],
    ] {
        let mut all = vec!["generate", "--synthetic", "tiny-d64", "--prompt", "hi"];
        all.extend(args);
        headroom_fails(&all);
    }
}

#[test]
fn logits_rejects_zero_chunk_and_cuda_without_a_gpu() {
    let err = logits_fails(&["--synthetic", "tiny-d64", "--chunk", "0"], "[1, 2]");
    assert!(err.contains("--chunk must be at least 1"), "{err}");
    // Without a CUDA driver (CI) the cuda backend is an error naming what is
    // missing, never a panic; with one it runs (bench/gpu/check_model.sh).
    assert!(
        headroom_hardware::cuda_availability().is_err(),
        "this test expects a machine without a CUDA driver; on a GPU run bench/gpu/check_model.sh"
    );
    let err = logits_fails(&["--synthetic", "tiny-d64", "--backend", "cuda"], "[1, 2]");
    assert!(
        err.contains("cuda backend") && err.contains("driver"),
        "{err}"
    );
}

#[test]
fn a_model_larger_than_memory_is_refused_up_front() {
    // The full 40-layer 35B model is ~70 GB in bf16: more than any CI machine's available memory
    // (skipped on a machine that has that much).
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available_kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemAvailable:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(u64::MAX);
    if available_kib == u64::MAX || available_kib > 60_000_000 {
        eprintln!("skipped: /proc/meminfo unreadable or more than 60 GB available");
        return;
    }
    let err = logits_fails(&["--synthetic", "qwen3.6-35b-a3b"], "[1]");
    assert!(
        err.contains("needs") && err.contains("GB") && err.contains(":layers=N"),
        "{err}"
    );
}

/// `serve` and `generate` check their capacity flags alike (one home:
/// `capacity_args.rs`), before loading a model: exit 1 naming the flag.
#[test]
fn serve_and_generate_refuse_bad_capacity_flags_by_name() {
    let huge = u64::MAX.to_string();
    for (flag, value) in [
        ("--max-running", "0"),
        ("--memory-fraction", "0"),
        ("--memory-fraction", "1.5"),
        ("--memory-budget-mib", "0"),
        ("--memory-budget-mib", huge.as_str()),
    ] {
        for command in [
            vec!["serve", "--synthetic", "tiny-d64", "--port", "0"],
            vec!["generate", "--synthetic", "tiny-d64", "--prompt", "hi"],
        ] {
            let mut args = command.clone();
            args.extend([flag, value]);
            let err = headroom_fails(&args);
            assert!(err.contains(flag), "{args:?}: {err}");
        }
    }
}

/// `--prefix-cache-state-slots 0` with caching on would leave the cache
/// nothing to resume a hit from: refused by name (exit 1) before the model
/// loads; with `--no-prefix-cache` the prefix-cache flags are a usage error.
#[test]
fn serve_and_generate_refuse_a_prefix_cache_without_snapshot_slots() {
    for command in [
        vec!["serve", "--synthetic", "tiny-d64", "--port", "0"],
        vec!["generate", "--synthetic", "tiny-d64", "--prompt", "hi"],
    ] {
        let mut args = command.clone();
        args.extend(["--prefix-cache-state-slots", "0"]);
        let err = headroom_fails(&args);
        assert!(
            err.contains("--prefix-cache-state-slots 0") && err.contains("--no-prefix-cache"),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        for flag in ["--prefix-cache-state-slots", "--prefix-cache-interval"] {
            let mut args = command.clone();
            args.extend([flag, "4", "--no-prefix-cache"]);
            let out = common::headroom_command().args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("cannot be used with"), "{args:?}: {err}");
        }
    }
}
