//! `headroom bench ttft` on the CPU with a tiny model, through the engine:
//! the JSON says `path: engine` and records the scheduler as run — the solo
//! stripe requested, resolved and why — and per length the measured runs,
//! the engine steps to the first token, the route every full-attention
//! layer reported (fused vs composed as requested), decode tokens/s and the
//! per-part breakdowns; `--chunk` is the engine's prefill chunk and solo
//! stripe; `--tensor-parallel 2` runs the same loop on a group; bad
//! arguments exit 1 naming the flag.

mod common;

use common::{headroom_fails, TempDir};

/// `bench ttft --synthetic tiny-d64` with `flags`: exit 2 (a usage error)
/// and its stderr.
fn usage_error(flags: &[&str]) -> String {
    let out = common::headroom_command()
        .args(["bench", "ttft", "--synthetic", "tiny-d64"])
        .args(flags)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "a usage error: {err}");
    err
}

/// `headroom ARGS` with the environment that would change the bench's
/// engine removed.
fn run_clean(args: &[&str]) -> std::process::Output {
    common::headroom_command()
        .args(args)
        .env_remove("HEADROOM_TP")
        .env_remove("HEADROOM_SOLO_STRIPE")
        .env_remove("HEADROOM_PREFILL_CHUNK")
        .output()
        .unwrap()
}

fn ttft_json(dir: &TempDir, name: &str, args: &[&str]) -> serde_json::Value {
    ttft_run(dir, name, args).0
}

/// `bench ttft ARGS --json DIR/NAME`, which must succeed: its JSON and its stderr.
fn ttft_run(dir: &TempDir, name: &str, args: &[&str]) -> (serde_json::Value, String) {
    let json = dir.0.join(name);
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--json", json.to_str().unwrap()]);
    let out = run_clean(&all);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{all:?}: {err}");
    let v = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (v, err)
}

fn parts(v: &serde_json::Value) -> Vec<&str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| p["part"].as_str().unwrap())
        .collect()
}

#[test]
fn writes_ttft_json_through_the_engine_with_the_routes_that_ran() {
    let dir = TempDir::new("ttft");
    for (flags, want) in [
        (vec!["--attn-execution", "fused"], "fused"),
        (
            vec!["--attn-execution", "fallback", "--attn-query-block", "32"],
            "composed qL=32",
        ),
    ] {
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
        ]);
        let v = ttft_json(&dir, "t.json", &args);
        assert_eq!(v["schema"], "headroom.bench.ttft/2");
        assert_eq!(v["path"], "engine");
        assert_eq!(v["batch_invariant"], false, "off unless asked");
        let e = &v["engine"];
        assert_eq!(e["path"], "engine");
        assert_eq!(e["solo_stripe"]["requested"], "auto");
        assert_eq!(e["solo_stripe"]["tokens"], 2048);
        assert_eq!(e["solo_stripe"]["bound"], "cpu_fixed");
        assert!(e["solo_stripe"]["reason"].as_str().unwrap().contains("CPU"));
        assert_eq!(e["scheduler"]["solo_stripe"], 2048);
        assert_eq!(e["scheduler"]["prefill_chunk"], 2048);
        let results = v["results"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        for r in results {
            assert_eq!(r["ttft_ms"].as_array().unwrap().len(), 2);
            assert!(r["median_ttft_ms"].as_f64().unwrap() > 0.0);
            assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0);
            assert!(r["peak_transient_bytes"].as_u64().unwrap() > 0);
            assert_eq!(r["steps_to_first_token"], 1, "one step per prompt");
            let att = r["attention"].as_str().unwrap();
            assert!(att.contains(want), "{att} should report {want}");
            assert!(r["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
            // No GPU clock on the CPU backend: the field is there, null.
            assert!(r.get("clock").is_some_and(|c| c.is_null()), "{r}");
            assert!(r.get("joules_per_run").is_some_and(|j| j.is_null()), "{r}");
            let prefill = parts(&r["breakdown"]);
            for p in ["attention", "gdn_rule", "moe", "norm"] {
                assert!(prefill.contains(&p), "breakdown lacks {p}: {prefill:?}");
            }
            assert_eq!(r["decode_profiled_steps"], 3);
            let decode = parts(&r["decode_breakdown"]);
            assert!(decode.contains(&"attention"), "{decode:?}");
            let moe = r["decode_breakdown"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["part"] == "moe")
                .unwrap();
            assert_eq!(
                moe["calls"].as_u64().unwrap() % 3,
                0,
                "the profiled decode steps only"
            );
        }
    }
}

/// One unwarmed run of a 40-token prompt on the tiny model.
const ONE_SHORT_RUN: [&str; 10] = [
    "bench",
    "ttft",
    "--synthetic",
    "tiny-d64",
    "--lengths",
    "40",
    "--iterations",
    "1",
    "--warmup",
    "0",
];

#[test]
fn chunk_and_solo_stripe_set_the_engine_steps_and_are_recorded() {
    let dir = TempDir::new("ttft-chunk");
    let base = ONE_SHORT_RUN;
    let mut args = base.to_vec();
    args.extend(["--chunk", "16"]);
    let v = ttft_json(&dir, "chunk.json", &args);
    assert_eq!(v["chunk"], 16);
    let e = &v["engine"];
    assert_eq!(e["scheduler"]["prefill_chunk"], 16);
    assert_eq!(e["solo_stripe"]["requested"], 16);
    assert_eq!(e["solo_stripe"]["bound"], "explicit");
    assert_eq!(
        v["results"][0]["steps_to_first_token"], 3,
        "40 = 16 + 16 + 8"
    );
    let mut args = base.to_vec();
    args.extend(["--chunk", "16", "--solo-stripe", "32"]);
    let v = ttft_json(&dir, "stripe.json", &args);
    assert_eq!(v["engine"]["scheduler"]["prefill_chunk"], 16);
    assert_eq!(v["engine"]["scheduler"]["solo_stripe"], 32);
    assert_eq!(v["results"][0]["steps_to_first_token"], 2, "40 = 32 + 8");
    let err = usage_error(&["--solo-stripe", "lots"]);
    assert!(
        err.contains("--solo-stripe") && err.contains("auto"),
        "{err}"
    );
}

#[test]
fn tensor_parallel_runs_the_same_loop_on_a_group() {
    let dir = TempDir::new("ttft-tp");
    let mut args = ONE_SHORT_RUN.to_vec();
    args.extend([
        "--decode",
        "3",
        "--breakdown",
        "--breakdown-each",
        "--tensor-parallel",
        "2",
    ]);
    let v = ttft_json(&dir, "tp.json", &args);
    assert_eq!(v["schema"], "headroom.bench.ttft.tp/2");
    assert_eq!(v["path"], "engine");
    assert_eq!(v["tensor_parallel"], 2);
    assert_eq!(v["engine"]["solo_stripe"]["tokens"], 2048);
    let r = &v["results"][0];
    assert_eq!(r["steps_to_first_token"], 1);
    assert_eq!(r["decode_tokens"].as_array().unwrap().len(), 3);
    assert_eq!(r["peak_bytes_per_rank"].as_array().unwrap().len(), 2);
    let ranks = r["breakdown"].as_array().unwrap();
    assert_eq!(ranks.len(), 2);
    for rank in ranks {
        assert!(parts(&rank["parts"]).contains(&"comm"), "{rank}");
    }
    // --breakdown-each: the one measured run, both ranks' parts.
    let runs = r["run_breakdowns"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    let run_ranks = runs[0].as_array().unwrap();
    assert_eq!(run_ranks.len(), 2);
    for rank in run_ranks {
        let p = parts(&rank["parts"]);
        assert!(p.contains(&"comm") && p.contains(&"attention"), "{rank}");
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
    let err = headroom_fails(&[
        "bench",
        "ttft",
        "--synthetic",
        "tiny-d64",
        "--decode",
        "1000000",
    ]);
    assert!(err.contains("--decode"), "{err}");
}

#[test]
fn batch_invariant_is_recorded_in_the_json() {
    let dir = TempDir::new("ttft-inv");
    let mut args = ONE_SHORT_RUN.to_vec();
    args.push("--batch-invariant");
    let v = ttft_json(&dir, "t.json", &args);
    assert_eq!(v["batch_invariant"], true);
}

#[test]
fn cuda_graphs_are_recorded_in_the_json_with_why_and_the_cpu_says_why_not() {
    let dir = TempDir::new("ttft-graphs");
    let v = ttft_json(&dir, "auto.json", &ONE_SHORT_RUN);
    assert_eq!(v["engine"]["cuda_graphs"]["requested"], "auto");
    assert_eq!(v["engine"]["cuda_graphs"]["on"], false);
    let mut args = ONE_SHORT_RUN.to_vec();
    args.extend_from_slice(&["--cuda-graphs", "on"]);
    let v = ttft_json(&dir, "on.json", &args);
    assert_eq!(v["engine"]["cuda_graphs"]["requested"], "on");
    assert_eq!(v["engine"]["cuda_graphs"]["on"], false);
    let why = v["engine"]["cuda_graphs"]["why"].as_str().unwrap();
    assert!(why.contains("cpu backend launches no kernels"), "{why}");
    let out = common::headroom_command()
        .args([
            "bench",
            "ttft",
            "--synthetic",
            "tiny-d64",
            "--lengths",
            "16",
            "--iterations",
            "1",
            "--warmup",
            "0",
            "--cuda-graphs",
            "on",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("step overlap off (auto: ")
            && text.contains("CUDA graphs off (on: the cpu backend launches no kernels"),
        "the engine line says how both resolved: {text}"
    );
    let err = usage_error(&["--cuda-graphs", "always"]);
    assert!(err.contains("auto, on or off"), "{err}");
}

#[test]
fn the_step_overlap_is_recorded_in_the_json_with_why() {
    let dir = TempDir::new("ttft-overlap");
    let v = ttft_json(&dir, "auto.json", &ONE_SHORT_RUN);
    assert_eq!(v["engine"]["step_overlap"]["requested"], "auto");
    assert_eq!(v["engine"]["step_overlap"]["on"], false);
    let mut args = ONE_SHORT_RUN.to_vec();
    args.extend_from_slice(&["--step-overlap", "on"]);
    let v = ttft_json(&dir, "on.json", &args);
    assert_eq!(v["engine"]["step_overlap"]["on"], true);
    assert_eq!(v["engine"]["step_overlap"]["why"], "on as asked");
}

#[test]
fn each_run_names_its_device_allocations_and_the_memory_reserved() {
    // ONE_SHORT_RUN's model and prompt, with its default warm-up and two runs.
    let mut args = ONE_SHORT_RUN[..6].to_vec();
    args.extend(["--iterations", "2"]);
    let out = run_clean(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let runs: Vec<&str> = err.lines().filter(|l| l.contains("tokens, run")).collect();
    assert_eq!(runs.len(), 3, "a warm-up and two measured runs: {err}");
    for l in runs {
        // The CPU backend has no device allocator: no calls, its bytes held.
        assert!(
            l.contains("device allocations 0, frees 0; reserved "),
            "{l}"
        );
        assert!(l.trim_end().ends_with(" GiB)"), "{l}");
    }
}

#[test]
fn breakdown_each_times_every_measured_run_by_part() {
    // Two measured runs after one warm-up: each gets its parts, the warm-up none.
    let dir = TempDir::new("ttft-each");
    let mut args = ONE_SHORT_RUN[..6].to_vec();
    args.extend(["--iterations", "2", "--warmup", "1", "--breakdown-each"]);
    let (v, err) = ttft_run(&dir, "each.json", &args);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.trim_start().starts_with("run "))
        .collect();
    assert_eq!(lines.len(), 2, "a parts line per measured run: {err}");
    for (l, it) in lines.iter().zip(["run 1:", "run 2:"]) {
        assert!(
            l.contains(it) && l.contains("attention") && l.contains("(sum "),
            "{l}"
        );
    }
    let r = &v["results"][0];
    let runs = r["run_breakdowns"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let ttft: Vec<f64> = r["ttft_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect();
    for (run, ms) in runs.iter().zip(&ttft) {
        let p = parts(run);
        assert!(p.contains(&"attention") && p.contains(&"embed"), "{p:?}");
        // The parts lie inside the run: their sum is positive and at most its TTFT.
        let sum: f64 = run
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["seconds"].as_f64().unwrap() * 1e3)
            .sum();
        assert!(sum > 0.0 && sum <= *ms, "parts {sum} ms, TTFT {ms} ms");
    }
    // Without the flag: no per-run parts, and the single profiled run is --breakdown's.
    let v = ttft_json(&dir, "none.json", &ONE_SHORT_RUN);
    assert_eq!(v["results"][0]["run_breakdowns"], serde_json::json!([]));
}
