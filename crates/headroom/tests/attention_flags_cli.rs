//! Attention flags on commands that ignore them are refused through the
//! binary (issue 13): exit 1, no panic, one message naming the flag and the
//! command; the commands that use them still accept them.

mod common;

fn headroom(args: &[&str]) -> std::process::Output {
    common::headroom_command().args(args).output().unwrap()
}

#[test]
fn attention_flags_are_refused_where_they_do_nothing() {
    let cases: &[(&[&str], &str)] = &[
        (&["kernels", "verify", "nowhere"], "kernels"),
        (&["bench", "validate", "missing.json"], "bench validate"),
        (
            &["bench", "prefill", "--synthetic", "tiny-d64"],
            "bench prefill",
        ),
        (&["bench", "attention"], "bench attention"),
        (&["bench", "serve"], "bench serve"),
        (
            &["qualify", "--synthetic", "tiny-d64", "--out", "nowhere"],
            "qualify",
        ),
    ];
    for (args, name) in cases {
        for flags in [
            &["--attn-execution", "fused"][..],
            &["--attn-query-block", "64"][..],
        ] {
            let mut all = args.to_vec();
            all.extend_from_slice(flags);
            let out = headroom(&all);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{all:?}: {err}");
            assert!(!err.contains("panicked"), "{all:?}: {err}");
            assert!(err.contains(flags[0]), "{all:?}: {err}");
            assert!(err.contains(&format!("headroom {name}`")), "{all:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{all:?}: {err}");
        }
    }
}

#[test]
fn commands_that_use_attention_flags_accept_them() {
    let out = headroom(&[
        "doctor",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d64",
        "--attn-execution",
        "fused",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("has no effect"), "{err}");
}
