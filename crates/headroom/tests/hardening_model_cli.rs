//! `logits` / `generate` with hostile input (issue 13): outputs that would
//! overwrite an input, unwritable output folders, prompts longer than the
//! model's context, NaN weights. Each is exit 1 with a message naming the
//! input, no panic, and the inputs left intact.

mod common;

use common::{headroom_fails, write_checkpoint, TempDir};
use headroom_model::{ModelConfig, TensorData, Weights};

fn ids_file(dir: &std::path::Path, n: usize) -> std::path::PathBuf {
    let path = dir.join("ids.json");
    let ids: Vec<u32> = (0..n).map(|i| (i % 200) as u32 + 1).collect();
    std::fs::write(&path, serde_json::to_string(&ids).unwrap()).unwrap();
    path
}

#[test]
fn logits_refuses_an_output_that_is_an_input() {
    let dir = TempDir::new("hard-out-in");
    let ids = ids_file(&dir.0, 4);
    let before = std::fs::read(&ids).unwrap();
    let p = ids.to_str().unwrap();
    let err = headroom_fails(&["logits", "--synthetic", "tiny-d64", "--ids", p, "--out", p]);
    assert!(
        err.contains("--out") && err.contains("one of the inputs"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&ids).unwrap(),
        before,
        "the ids file is intact"
    );

    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    write_checkpoint(&dir.0, &cfg, &Weights::synthetic(&cfg, 1), |_| {});
    let weights = dir.0.join("model.safetensors");
    let size = std::fs::metadata(&weights).unwrap().len();
    let m = dir.0.to_str().unwrap();
    let err = headroom_fails(&[
        "logits",
        "--model",
        m,
        "--ids",
        p,
        "--out",
        weights.to_str().unwrap(),
    ]);
    assert!(err.contains("input folder"), "{err}");
    assert_eq!(
        std::fs::metadata(&weights).unwrap().len(),
        size,
        "checkpoint intact"
    );
}

#[test]
fn logits_checks_the_output_folder_before_running() {
    let dir = TempDir::new("hard-out-missing");
    let ids = ids_file(&dir.0, 4);
    let out = dir.0.join("no/such/folder/logits.safetensors");
    let err = headroom_fails(&[
        "logits",
        "--synthetic",
        "tiny-d64",
        "--ids",
        ids.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        err.contains("does not exist") && !err.contains("safetensors file"),
        "{err}"
    );
}

#[test]
fn prompts_longer_than_the_context_are_refused_up_front() {
    let dir = TempDir::new("hard-long");
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let n = cfg.max_position_embeddings + 1;
    let ids = ids_file(&dir.0, n);
    let out = dir.0.join("logits.safetensors");
    let started = std::time::Instant::now();
    let err = headroom_fails(&[
        "logits",
        "--synthetic",
        "tiny-d64",
        "--ids",
        ids.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        err.contains(&n.to_string()) && err.contains("context"),
        "{err}"
    );
    assert!(
        started.elapsed().as_secs() < 60,
        "refused before the forward"
    );
    assert!(!out.exists());

    let prompt = dir.0.join("prompt.txt");
    std::fs::write(&prompt, "a".repeat(n)).unwrap();
    let err = headroom_fails(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt-file",
        prompt.to_str().unwrap(),
    ]);
    assert!(err.contains("prompt") && err.contains("context"), "{err}");
}

#[test]
fn nan_weights_fail_loudly_instead_of_writing_nan_logits() {
    let dir = TempDir::new("hard-nan");
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    write_checkpoint(&dir.0, &cfg, &Weights::synthetic(&cfg, 1), |tensors| {
        let (_, t) = tensors
            .iter_mut()
            .find(|(n, _)| n == "model.norm.weight")
            .unwrap();
        if let TensorData::F32(v) = &mut t.data {
            v.iter_mut().for_each(|x| *x = f32::NAN);
        }
    });
    let ids = ids_file(&dir.0, 4);
    let out = dir.0.join("logits.safetensors");
    let err = headroom_fails(&[
        "logits",
        "--model",
        dir.0.to_str().unwrap(),
        "--ids",
        ids.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        err.contains("norm.weight") && err.contains("non-finite"),
        "{err}"
    );
    assert!(!out.exists());
}
