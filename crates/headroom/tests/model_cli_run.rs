//! `headroom logits` and `headroom generate` end to end: a checkpoint folder
//! gives the same logits as the synthetic model it was written from, chunked
//! prefill matches one pass, and generation is deterministic.

mod common;

use common::{
    headroom, headroom_fails, read_f32_tensor, rel_err, safetensors_header, write_checkpoint,
    write_tensors, TempDir,
};
use headroom_cpu::CpuBackend;
use headroom_model::{ModelConfig, Tensor, Weights};
use std::path::Path;

/// Reads the `logits` tensor of a file `headroom logits` wrote, checking that
/// the file holds that one tensor and nothing else.
fn read_logits(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let (shape, v) = read_f32_tensor(path, "logits");
    let bytes = std::fs::read(path).unwrap();
    let (header, data_start) = safetensors_header(&bytes);
    let obj = header.as_object().unwrap();
    assert_eq!(obj.keys().collect::<Vec<_>>(), vec!["logits"]);
    assert_eq!(bytes.len(), data_start + 4 * v.len());
    (shape, v)
}

/// Runs `headroom ARGS --ids IDS --out OUT` and reads the logits it wrote.
fn logits(args: &[&str], ids: &Path, out: &Path) -> (Vec<usize>, Vec<f32>) {
    let mut all = args.to_vec();
    all.extend(["--ids", ids.to_str().unwrap()]);
    all.extend(["--out", out.to_str().unwrap()]);
    headroom(&all);
    read_logits(out)
}

#[test]
fn checkpoint_folder_matches_synthetic_and_chunks_match_one_pass() {
    let tmp = TempDir::new("logits");
    // The tiny-d256 synthetic model (weights seed 0) written as a VL-style checkpoint, per-expert layout.
    let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
    let model_dir = tmp.0.join("model");
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::write(model_dir.join("config.json"), cfg.to_hf_json().to_string()).unwrap();
    let w = Weights::synthetic(&cfg, 0);
    let moe = *cfg.moe().unwrap();
    let (i, h) = (moe.moe_intermediate_size, cfg.hidden_size);
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (n, t) in w.iter() {
        let full = if n == "lm_head.weight" {
            n.to_string()
        } else {
            format!("model.language_model.{n}")
        };
        if let Some(base) = full.strip_suffix(".gate_up_proj") {
            let v = t.to_f32_vec();
            for e in 0..moe.num_experts {
                let o = e * 2 * i * h;
                tensors.push((
                    format!("{base}.{e}.gate_proj.weight"),
                    Tensor::from_f32(vec![i, h], v[o..o + i * h].to_vec()),
                ));
                tensors.push((
                    format!("{base}.{e}.up_proj.weight"),
                    Tensor::from_f32(vec![i, h], v[o + i * h..o + 2 * i * h].to_vec()),
                ));
            }
        } else if let Some(base) = full
            .strip_suffix(".down_proj")
            .filter(|b| b.ends_with("experts"))
        {
            let v = t.to_f32_vec();
            for e in 0..moe.num_experts {
                tensors.push((
                    format!("{base}.{e}.down_proj.weight"),
                    Tensor::from_f32(vec![h, i], v[e * h * i..(e + 1) * h * i].to_vec()),
                ));
            }
        } else {
            tensors.push((full, t.clone()));
        }
    }
    write_tensors(&model_dir.join("model.safetensors"), &tensors);

    let ids: Vec<u32> = (0..150).map(|k| (k * 37 + 11) % 512).collect();
    let ids_path = tmp.0.join("ids.json");
    std::fs::write(&ids_path, serde_json::to_string(&ids).unwrap()).unwrap();
    let out = |name: &str| tmp.0.join(name);
    let syn_args = ["logits", "--synthetic", "tiny-d256"];

    let (shape, syn) = logits(&syn_args, &ids_path, &out("syn.safetensors"));
    assert_eq!(shape, vec![ids.len(), cfg.vocab_size]);
    assert!(syn.iter().all(|x| x.is_finite()));
    let model_args = ["logits", "--model", model_dir.to_str().unwrap()];
    let (_, dir) = logits(&model_args, &ids_path, &out("dir.safetensors"));
    assert_eq!(dir, syn, "loaded checkpoint == synthetic model");
    let chunk_args = [&syn_args[..], &["--chunk", "64"]].concat();
    let (_, chunk) = logits(&chunk_args, &ids_path, &out("chunk.safetensors"));
    assert!(
        rel_err(&chunk, &syn) < 1e-5,
        "chunked {}",
        rel_err(&chunk, &syn)
    );
    let q32_args = [&["--attn-query-block", "32"], &syn_args[..]].concat();
    let (_, q32) = logits(&q32_args, &ids_path, &out("q32.safetensors"));
    assert!(rel_err(&q32, &syn) < 1e-5, "qL 32 {}", rel_err(&q32, &syn));
    // Different weights seed, different logits (the seed is honoured).
    let s1_args = [&syn_args[..], &["--weights-seed", "1"]].concat();
    let (_, s1) = logits(&s1_args, &ids_path, &out("s1.safetensors"));
    assert!(rel_err(&s1, &syn) > 0.1);
}

#[test]
fn generate_streams_deterministic_text() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompt",
            "Hello, Headroom",
            "--max-tokens",
            "12",
        ];
        args.extend_from_slice(extra);
        String::from_utf8_lossy(&headroom(&args).stdout).to_string()
    };
    let greedy = run(&[]);
    assert!(!greedy.trim().is_empty());
    assert_eq!(greedy, run(&[]), "greedy is deterministic");
    let a = run(&["--temperature", "1.0", "--seed", "1"]);
    assert_eq!(
        a,
        run(&["--temperature", "1.0", "--seed", "1"]),
        "seeded sampling is reproducible"
    );
    let others: Vec<String> = (2..6)
        .map(|s| run(&["--temperature", "1.0", "--seed", &s.to_string()]))
        .collect();
    assert!(
        others.iter().any(|o| *o != a),
        "different seeds give different text"
    );
}

/// A small byte-level BPE `tokenizer.json` (GPT-2 byte alphabet + a few merges).
fn write_tokenizer(dir: &Path) {
    let direct: Vec<u32> = (33..=126).chain(161..=172).chain(174..=255).collect();
    let mut extra = 0;
    let mut vocab = serde_json::Map::new();
    for b in 0..256u32 {
        let c = if direct.contains(&b) {
            char::from_u32(b).unwrap()
        } else {
            extra += 1;
            char::from_u32(255 + extra).unwrap()
        };
        vocab.insert(c.to_string(), b.into());
    }
    let merges = ["l l", "h e", "he ll", "hell o"];
    for (i, m) in merges.iter().enumerate() {
        vocab.insert(m.replace(' ', ""), (256 + i).into());
    }
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": merges}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
}

#[test]
fn generate_from_a_checkpoint_folder_uses_its_tokenizer() {
    let tmp = TempDir::new("generate");
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let w = Weights::synthetic(&cfg, 0);
    write_checkpoint(&tmp.0, &cfg, &w, |_| {});
    let dir = tmp.0.to_str().unwrap();

    // No tokenizer.json: a clear error.
    let stderr = headroom_fails(&["generate", "--model", dir, "--prompt", "hello"]);
    assert!(stderr.contains("tokenizer.json"), "{stderr}");

    write_tokenizer(&tmp.0);
    let run = || {
        let out = headroom(&[
            "generate",
            "--model",
            dir,
            "--prompt",
            "hello hello",
            "--max-tokens",
            "8",
        ]);
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let text = run();
    assert!(!text.trim().is_empty());
    assert_eq!(text, run());
    // The prompt went through the BPE (hello | Ġ | hello), not the byte fallback (11 ids).
    let out = headroom(&[
        "generate",
        "--model",
        dir,
        "--prompt",
        "hello hello",
        "--max-tokens",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("prompt 3 tokens"), "{stderr}");
}

#[test]
fn generate_reads_a_prompt_file() {
    let tmp = TempDir::new("prompt");
    let path = tmp.0.join("prompt.txt");
    std::fs::write(&path, "Hello, Headroom").unwrap();
    let from_file = headroom(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt-file",
        path.to_str().unwrap(),
        "--max-tokens",
        "6",
    ]);
    let inline = headroom(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        "Hello, Headroom",
        "--max-tokens",
        "6",
    ]);
    assert_eq!(from_file.stdout, inline.stdout);
    assert!(String::from_utf8_lossy(&from_file.stderr).contains("prompt 15 tokens"));
    let missing = headroom_fails(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt-file",
        tmp.0.join("nope.txt").to_str().unwrap(),
    ]);
    assert!(
        missing.contains("--prompt-file") && missing.contains("nope.txt: does not exist"),
        "{missing}"
    );
}

/// The tiny-d64 synthetic model re-packed as a `qwen3_next` checkpoint (fused
/// `in_proj_qkvz` / `in_proj_ba`, grouped per key head) gives the synthetic model's logits.
#[test]
fn qwen3_next_checkpoint_gives_the_same_logits() {
    let tmp = TempDir::new("next");
    let syn_cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let w = Weights::synthetic(&syn_cfg, 0);
    let mut json = syn_cfg.to_hf_json();
    json["model_type"] = "qwen3_next".into();
    json["architectures"] = serde_json::json!(["Qwen3NextForCausalLM"]);
    let model_dir = tmp.0.join("model");
    std::fs::create_dir_all(&model_dir).unwrap();
    std::fs::write(model_dir.join("config.json"), json.to_string()).unwrap();

    let l = syn_cfg.linear;
    let (nk, dk, dv, h) = (
        l.num_key_heads,
        l.key_head_dim,
        l.value_head_dim,
        syn_cfg.hidden_size,
    );
    let r = l.num_value_heads / nk;
    let rows = |name: &str, start: usize, n: usize| -> Vec<f32> {
        w.get(name).unwrap().to_f32_vec()[start * h..(start + n) * h].to_vec()
    };
    let mut tensors: Vec<(String, Tensor)> = Vec::new();
    for (n, t) in w.iter() {
        if n.contains(".linear_attn.in_proj_") {
            if let Some(base) = n.strip_suffix(".in_proj_qkv.weight") {
                let (qkv, z) = (
                    format!("{base}.in_proj_qkv.weight"),
                    format!("{base}.in_proj_z.weight"),
                );
                let (b, a) = (
                    format!("{base}.in_proj_b.weight"),
                    format!("{base}.in_proj_a.weight"),
                );
                let mut qkvz = Vec::new();
                let mut ba = Vec::new();
                for g in 0..nk {
                    qkvz.extend(rows(&qkv, g * dk, dk));
                    qkvz.extend(rows(&qkv, nk * dk + g * dk, dk));
                    qkvz.extend(rows(&qkv, 2 * nk * dk + g * r * dv, r * dv));
                    qkvz.extend(rows(&z, g * r * dv, r * dv));
                    ba.extend(rows(&b, g * r, r));
                    ba.extend(rows(&a, g * r, r));
                }
                let n_rows = qkvz.len() / h;
                tensors.push((
                    format!("model.{base}.in_proj_qkvz.weight"),
                    Tensor::from_f32(vec![n_rows, h], qkvz),
                ));
                tensors.push((
                    format!("model.{base}.in_proj_ba.weight"),
                    Tensor::from_f32(vec![2 * nk * r, h], ba),
                ));
            }
            continue;
        }
        let name = if n == "lm_head.weight" {
            n.to_string()
        } else {
            format!("model.{n}")
        };
        tensors.push((name, t.clone()));
    }
    write_tensors(&model_dir.join("model.safetensors"), &tensors);

    let ids_path = tmp.0.join("ids.json");
    std::fs::write(&ids_path, "[5, 300, 17, 42, 511, 0, 99, 256, 128, 7]").unwrap();
    let a = logits(
        &["logits", "--synthetic", "tiny-d64"],
        &ids_path,
        &tmp.0.join("a.safetensors"),
    );
    let b = logits(
        &["logits", "--model", model_dir.to_str().unwrap()],
        &ids_path,
        &tmp.0.join("b.safetensors"),
    );
    assert_eq!(a, b);
}

/// Generation stops at an end-of-sequence id of generation_config.json: with the
/// first greedy token declared EOS, nothing is printed and one token is generated.
#[test]
fn generate_stops_at_the_generation_config_eos() {
    use headroom_model::tokenizer::Tokenizer;
    use headroom_model::{ForwardOptions, Qwen35Model};
    let tmp = TempDir::new("eos");
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let w = Weights::synthetic(&cfg, 0);
    write_checkpoint(&tmp.0, &cfg, &w, |_| {});
    write_tokenizer(&tmp.0);

    let ids = Tokenizer::from_dir(&tmp.0)
        .unwrap()
        .encode("hello")
        .unwrap();
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap();
    let logits = model
        .forward_logits(&ids, &ForwardOptions::default())
        .unwrap();
    let last = &logits[logits.len() - cfg.vocab_size..];
    let first = (0..last.len())
        .max_by(|&a, &b| last[a].total_cmp(&last[b]))
        .unwrap();
    let dir = tmp.0.to_str().unwrap();
    let before = headroom(&[
        "generate",
        "--model",
        dir,
        "--prompt",
        "hello",
        "--max-tokens",
        "5",
    ]);
    assert!(String::from_utf8_lossy(&before.stderr).contains("generated 5 tokens"));

    std::fs::write(
        tmp.0.join("generation_config.json"),
        format!("{{\"eos_token_id\": [{first}]}}"),
    )
    .unwrap();
    let out = headroom(&[
        "generate",
        "--model",
        dir,
        "--prompt",
        "hello",
        "--max-tokens",
        "5",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("generated 1 tokens"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
