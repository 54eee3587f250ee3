//! `headroom logits --model DIR` on the transformers-written fixtures of the
//! model crate (tests/fixtures, made by crates/model/fixtures/make_fixtures.py)
//! matches transformers' logits within 1e-4 relative Frobenius error, with one
//! pass, chunked prefill, a small composed query block and the fused route.

mod common;

use common::{headroom, read_f32_tensor, rel_err, TempDir};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model/tests/fixtures")
}

#[test]
fn logits_command_matches_transformers_fixtures() {
    let tmp = TempDir::new("parity");
    let mut checked = 0;
    for name in ["moe_d256", "moe_d64", "dense_d64"] {
        let dir = fixtures().join(name);
        if !dir.join("model.safetensors").exists() {
            panic!("fixture {} is missing", dir.display());
        }
        for prompt in ["ids_40.json", "ids_300.json"] {
            let (shape, want) = read_f32_tensor(
                &dir.join(
                    prompt
                        .replace("ids_", "logits_")
                        .replace(".json", ".safetensors"),
                ),
                "logits",
            );
            for extra in [
                &[][..],
                &["--chunk", "64"][..],
                &["--attn-query-block", "16"][..],
                &["--attn-execution", "fused"][..],
            ] {
                let out = tmp.0.join("logits.safetensors");
                let ids = dir.join(prompt);
                let mut args = vec!["logits", "--model", dir.to_str().unwrap()];
                args.extend(["--ids", ids.to_str().unwrap()]);
                args.extend(["--out", out.to_str().unwrap()]);
                args.extend(extra);
                let result = headroom(&args);
                // The route each arm asked for is the one that ran (as the forward reported it).
                let stderr = String::from_utf8_lossy(&result.stderr);
                let ran = match extra.first() {
                    Some(&"--attn-query-block") => Some("layer 3 composed qL=16"),
                    Some(&"--attn-execution") => Some("layer 3 fused"),
                    _ => None,
                };
                if let Some(ran) = ran {
                    assert!(stderr.contains(ran), "{name} {extra:?}: {stderr}");
                }
                let (got_shape, got) = read_f32_tensor(&out, "logits");
                assert_eq!(got_shape, shape);
                let e = rel_err(&got, &want);
                assert!(e < 1e-4, "{name} {prompt} {extra:?}: relative error {e:e}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 24);
}
