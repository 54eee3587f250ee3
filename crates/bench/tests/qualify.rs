//! The decision rule, the written entry (strict loader, resolve(), tamper
//! detection), and the report's citations.

mod support;

use headroom_bench::attention::{self, AttentionBenchConfig};
use headroom_bench::backends::backend_for;
use headroom_bench::citations::{cite_all, CLAIMS};
use headroom_bench::qualify::{
    candidate_routes, decide, entry_id, leaders, QualifyEvidence, EVIDENCE_SCHEMA,
};
use headroom_bench::qualify_output::write_outputs;
use headroom_core::{BackendKind, Route, RouteRequest};
use headroom_policy::{
    resolve, AttentionControl, Controls, QualifiedResult, Registry, ResolutionSource,
};
use support::{bench, kinds, Fake};

fn q512_fast(r: RouteRequest) -> f64 {
    match r {
        RouteRequest::Composed { query_block: 512 } => 0.005,
        RouteRequest::Fused => 0.02,
        _ => 0.01,
    }
}

fn fused_fast(r: RouteRequest) -> f64 {
    match r {
        RouteRequest::Fused => 0.004,
        RouteRequest::Composed { query_block: 512 } => 0.005,
        _ => 0.01,
    }
}

#[test]
fn a_clearly_faster_block_wins() {
    let mut t = Fake {
        speed: q512_fast,
        ..Fake::honest()
    };
    let f = bench(&mut t, "fallback:128,fallback:512,fused", &[1024, 2048]);
    let d = decide(&f, u64::MAX);
    assert_eq!((d.route, d.query_block), (Route::Composed, Some(512)));
    assert!(d
        .verdicts
        .iter()
        .any(|v| v.arm == "fallback:512" && v.qualifies));
    assert!(d.verdicts.iter().any(|v| v.arm == "fused" && !v.qualifies));
}

#[test]
fn the_budget_excludes_a_block_and_the_default_stands() {
    let mut t = Fake {
        speed: q512_fast,
        ..Fake::honest()
    };
    let f = bench(&mut t, "fallback:128,fallback:512", &[1024, 2048]);
    // The fake reports 1000 B per query-block row: 512 rows = 512000 B.
    let d = decide(&f, 200_000);
    assert_eq!((d.route, d.query_block), (Route::Composed, Some(128)));
    assert_eq!(d.result(), QualifiedResult::Composed { query_block: 128 });
}

#[test]
fn equal_speeds_do_not_qualify_a_block_but_fused_qualifies_when_no_slower() {
    let f = bench(
        &mut Fake::honest(),
        "fallback:128,fallback:512,fused",
        &[1024],
    );
    let d = decide(&f, u64::MAX);
    assert!(d
        .verdicts
        .iter()
        .any(|v| v.arm == "fallback:512" && !v.qualifies));
    assert_eq!(d.route, Route::Fused, "{d:?}");
    let mut t = Fake {
        speed: fused_fast,
        ..Fake::honest()
    };
    let f = bench(&mut t, "fallback:128,fallback:512,fused", &[1024, 2048]);
    assert_eq!(decide(&f, u64::MAX).route, Route::Fused);
}

#[test]
fn leaders_are_the_baseline_the_fastest_blocks_and_fused() {
    let routes = candidate_routes(true);
    let cfg = AttentionBenchConfig {
        head_dim: 64,
        q_heads: 2,
        kv_heads: 1,
        dtype: headroom_core::Dtype::F32,
        lengths: vec![64, 96],
        history: 0,
        routes: routes.clone(),
        iterations: 1,
        warmup: 0,
        seed: 1,
    };
    let mut be = backend_for(BackendKind::Cpu).unwrap();
    let att = attention::run(&cfg, be.as_mut(), headroom_hardware::detect_cpu()).unwrap();
    let arms: Vec<String> = leaders(&att, &routes, u64::MAX)
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(arms[0], "fallback:128");
    assert_eq!(arms.len(), 4, "{arms:?}");
    assert_eq!(arms[3], "fused");
    // A budget of one byte excludes every composed block but the baseline.
    let arms: Vec<String> = leaders(&att, &routes, 1)
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(arms, vec!["fallback:128", "fused"]);
}

#[test]
fn blocks_over_the_budget_are_not_measured() {
    let all = candidate_routes(true);
    // 16 heads, 32k rows: whole = 64 GiB of scores, 1024 = 2 GiB, 512 = 1 GiB.
    let kept = headroom_bench::qualify::affordable(all.clone(), 16, 32768, 1 << 30);
    let names: Vec<String> = kept.iter().map(|r| r.to_string()).collect();
    assert_eq!(
        names,
        vec!["composed:128", "composed:256", "composed:512", "fused"]
    );
    assert_eq!(
        headroom_bench::qualify::affordable(all.clone(), 4, 512, 1 << 30),
        all
    );
}

fn evidence(speed: fn(RouteRequest) -> f64) -> QualifyEvidence {
    let mut t = Fake {
        speed,
        ..Fake::honest()
    };
    let f = bench(&mut t, "fallback:128,fallback:512,fused", &[1024, 2048]);
    let d = decide(&f, u64::MAX);
    let layer = kinds()[1];
    let routes = vec![RouteRequest::Composed { query_block: 128 }];
    let cfg = AttentionBenchConfig {
        head_dim: layer.head_dim,
        q_heads: layer.q_heads,
        kv_heads: layer.kv_heads,
        dtype: layer.dtype,
        lengths: vec![32],
        history: 0,
        routes,
        iterations: 1,
        warmup: 0,
        seed: 1,
    };
    let mut be = backend_for(BackendKind::Cpu).unwrap();
    let att = attention::run(&cfg, be.as_mut(), f.hardware.clone()).unwrap();
    QualifyEvidence {
        schema: EVIDENCE_SCHEMA.into(),
        id: entry_id(&f.hardware, &layer, &d.result()),
        layer,
        attention: att,
        prefill: f,
        decision: d,
    }
}

#[test]
fn the_written_entry_loads_strictly_resolves_here_and_detects_tampering() {
    for (speed, route) in [
        (q512_fast as fn(RouteRequest) -> f64, Route::Composed),
        (fused_fast, Route::Fused),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ev = evidence(speed);
        let (entry, paths) = write_outputs(dir.path(), &ev, "2026-11-30").unwrap();
        for p in [
            &paths.entry,
            &paths.evidence,
            &paths.report,
            &paths.ttft_plot,
            &paths.transient_plot,
        ] {
            assert!(dir.path().join(p).is_file(), "{p}");
        }
        let svg = std::fs::read_to_string(dir.path().join(&paths.ttft_plot)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("fallback:512"));
        let reg = Registry::from_dirs(&[dir.path().to_path_buf()]);
        assert_eq!(reg.entries().len(), 1);
        assert_eq!(reg.entries()[0].entry.as_ref().unwrap(), &entry);
        let controls = Controls {
            execution: AttentionControl::Auto,
            ..Controls::default()
        };
        let r = resolve(
            &headroom_hardware::detect_cpu(),
            &kinds()[1],
            &controls,
            &reg,
        );
        assert_eq!(r.route, route);
        assert_eq!(r.source, ResolutionSource::Qualified);
        assert_eq!(r.qualification_id.as_deref(), Some(entry.id.as_str()));
        if route == Route::Composed {
            assert_eq!(r.query_block, Some(512));
        }
        // One changed byte in the evidence: the entry is rejected with the reason.
        let ev_path = dir.path().join(&paths.evidence);
        let mut bytes = std::fs::read(&ev_path).unwrap();
        let i = bytes.len() / 2;
        bytes[i] = if bytes[i] == b'1' { b'2' } else { b'1' };
        std::fs::write(&ev_path, bytes).unwrap();
        let reg = Registry::from_dirs(&[dir.path().to_path_buf()]);
        let why = reg.entries()[0].entry.as_ref().unwrap_err();
        assert!(why.contains("sha256"), "{why}");
        let r = resolve(
            &headroom_hardware::detect_cpu(),
            &kinds()[1],
            &controls,
            &reg,
        );
        assert_eq!(r.source, ResolutionSource::Default);
    }
}

#[test]
fn the_report_links_numbers_to_json_fields_and_cites_source() {
    let dir = tempfile::tempdir().unwrap();
    let ev = evidence(q512_fast);
    let (_, paths) = write_outputs(dir.path(), &ev, "2026-11-30").unwrap();
    let md = std::fs::read_to_string(dir.path().join(&paths.report)).unwrap();
    let median = format!("{:.3}", ev.prefill.samples[0].ttft_ms.median);
    assert!(
        md.contains(&format!(
            "[{median}]({}#/prefill/samples/0/ttft_ms/median)",
            paths.evidence
        )),
        "{md}"
    );
    for c in cite_all().unwrap() {
        assert!(
            md.contains(&format!("`{}:{}`", c.claim.file, c.line)),
            "{md}"
        );
    }
}

#[test]
fn every_cited_line_holds_its_anchor() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cites = cite_all().unwrap();
    assert_eq!(cites.len(), CLAIMS.len());
    for c in cites {
        let text = std::fs::read_to_string(format!("{root}/{}", c.claim.file)).unwrap();
        let line = text.lines().nth(c.line - 1).unwrap();
        assert!(
            line.contains(c.claim.anchor),
            "{}:{} is `{line}`, expected `{}`",
            c.claim.file,
            c.line,
            c.claim.anchor
        );
    }
}
