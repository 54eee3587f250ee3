//! What the held-out probe (`bench/probe/probe.py`, `docs/probe.md`) found
//! on the command line: `serve --max-waiting 0` and `--max-body-bytes 0`
//! (every request refused) are start-up errors naming the flag; a
//! `--prompts` line with a bad value names its field; an invalid entry in a
//! `--qualifications` folder is warned about by name instead of skipped
//! silently.

mod common;

use common::{headroom, headroom_fails, TempDir};

#[test]
fn serve_refuses_a_zero_queue_or_body_limit_by_name() {
    for flag in ["--max-waiting", "--max-body-bytes"] {
        let err = headroom_fails(&["serve", "--synthetic", "tiny-d64", "--port", "0", flag, "0"]);
        assert!(
            err.contains(flag) && err.contains("at least 1"),
            "{flag}: {err}"
        );
    }
}

#[test]
fn a_prompts_line_with_a_bad_value_names_the_field() {
    let dir = TempDir::new("probe-prompts");
    let p = dir.0.join("p.jsonl");
    for (line, field) in [
        ("{\"prompt\": \"a\", \"max_tokens\": -1}", "max_tokens"),
        ("{\"prompt\": 5}", "prompt"),
        ("{\"ids\": [1, \"x\"]}", "ids[1]"),
    ] {
        std::fs::write(&p, format!("{line}\n")).unwrap();
        let err = headroom_fails(&[
            "generate",
            "--synthetic",
            "tiny-d64",
            "--prompts",
            p.to_str().unwrap(),
        ]);
        assert!(err.contains(&format!("{field}: ")), "{line}: {err}");
        assert!(err.contains("line 1"), "{err}");
    }
    // Trailing text after the object is still refused.
    std::fs::write(&p, "{\"prompt\": \"a\"} x\n").unwrap();
    let err = headroom_fails(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompts",
        p.to_str().unwrap(),
    ]);
    assert!(err.contains("line 1"), "{err}");
}

#[test]
fn an_invalid_qualification_entry_is_named_in_a_warning() {
    let dir = TempDir::new("probe-qual");
    std::fs::write(dir.0.join("broken.toml"), "id = 5\n[hardware\n").unwrap();
    let out = headroom(&[
        "generate",
        "--synthetic",
        "tiny-d64",
        "--prompt",
        "hi",
        "--max-tokens",
        "1",
        "--qualifications",
        dir.0.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("broken.toml") && err.contains("invalid and not used"),
        "{err}"
    );
}
