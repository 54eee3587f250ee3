//! The attention bench runner against scripted backends: it records what the
//! backend reported (not what was requested), checks outputs against the f64
//! reference, refuses arms that change what they run, and writes the schema.

use headroom_bench::attention::{self, AttentionBenchConfig};
use headroom_bench::backends::cpu::CpuBackend;
use headroom_bench::schema::ATTENTION_SCHEMA;
use headroom_bench::AttentionBenchBackend;
use headroom_core::{AttentionReport, AttentionShape, Dtype, Route, RouteRequest};

fn hardware() -> headroom_hardware::HardwareFingerprint {
    headroom_hardware::detect_cpu()
}

fn config(routes: &[&str], lengths: &[usize]) -> AttentionBenchConfig {
    AttentionBenchConfig {
        head_dim: 64,
        q_heads: 4,
        kv_heads: 2,
        dtype: Dtype::Bf16,
        lengths: lengths.to_vec(),
        history: 7,
        routes: routes.iter().map(|r| r.parse().unwrap()).collect(),
        iterations: 3,
        warmup: 1,
        seed: 11,
    }
}

/// Wraps the CPU backend and rewrites what it returns.
struct Scripted {
    inner: CpuBackend,
    /// Always claim to have run this instead.
    claim: Option<AttentionReport>,
    /// Change the claimed transient bytes on every run.
    drift: bool,
    /// Add this to every output element (of `skew_head` only, when set).
    skew: f32,
    skew_head: Option<usize>,
    runs: u64,
}

impl Scripted {
    fn new() -> Self {
        Scripted {
            inner: CpuBackend::default(),
            claim: None,
            drift: false,
            skew: 0.0,
            skew_head: None,
            runs: 0,
        }
    }
}

impl AttentionBenchBackend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn load(
        &mut self,
        shape: &AttentionShape,
        dtype: Dtype,
        q: &[f32],
        k: &[f32],
        v: &[f32],
    ) -> anyhow::Result<()> {
        self.inner.load(shape, dtype, q, k, v)
    }
    fn run(&mut self, route: RouteRequest) -> anyhow::Result<(f64, AttentionReport)> {
        let (ms, mut report) = self.inner.run(route)?;
        self.runs += 1;
        if let Some(c) = self.claim {
            report = c;
        }
        if self.drift {
            report.transient_bytes += self.runs;
        }
        Ok((ms, report))
    }
    fn output(&mut self) -> anyhow::Result<Vec<f32>> {
        // Head h spans q_len * head_dim elements; skew_head is used with length 200, head_dim 64.
        let head_len = 200 * 64;
        Ok(self
            .inner
            .output()?
            .into_iter()
            .enumerate()
            .map(|(i, x)| match self.skew_head {
                Some(h) if i / head_len != h => x,
                _ => x + self.skew,
            })
            .collect())
    }
}

#[test]
fn cpu_samples_carry_the_reported_route_and_a_small_error() {
    let cfg = config(&["composed:0", "composed:16", "fused"], &[20, 150]);
    let file = attention::run(&cfg, &mut CpuBackend::default(), hardware()).unwrap();
    assert_eq!(file.schema, ATTENTION_SCHEMA);
    assert_eq!(file.samples.len(), 6);
    let s = &file.samples[0];
    assert_eq!(
        (s.length, s.history, s.route, s.query_block),
        (20, 7, Route::Composed, Some(20))
    );
    assert_eq!(file.samples[4].query_block, Some(16));
    assert_eq!(
        (file.samples[5].route, file.samples[5].query_block),
        (Route::Fused, None)
    );
    for s in &file.samples {
        let err = s.rel_err.expect("finite output");
        assert!(err < 1e-2, "{s:?}");
        assert!(s.median_ms >= s.min_ms && s.min_ms > 0.0);
        let flops = cfg.shape(s.length).causal_flops();
        assert!((s.gflops - flops / (s.median_ms * 1e-3) / 1e9).abs() < 1e-9 * s.gflops.max(1.0));
        assert!(s.transient_bytes > 0);
        assert_eq!(
            (s.dtype, s.head_dim, s.q_heads, s.kv_heads, s.iterations),
            (Dtype::Bf16, 64, 4, 2, 3)
        );
    }
}

#[test]
fn records_what_the_backend_claims_it_ran() {
    let mut b = Scripted::new();
    b.claim = Some(AttentionReport {
        route: Route::Composed,
        query_block: Some(128),
        transient_bytes: 5,
    });
    let file = attention::run(&config(&["fused"], &[10]), &mut b, hardware()).unwrap();
    let s = &file.samples[0];
    assert_eq!(
        (s.route, s.query_block, s.transient_bytes),
        (Route::Composed, Some(128), 5)
    );
    assert_eq!(s.backend, "scripted");
}

#[test]
fn refuses_an_arm_whose_report_changes_between_runs() {
    let mut b = Scripted::new();
    b.drift = true;
    let err = attention::run(&config(&["fused"], &[10]), &mut b, hardware()).unwrap_err();
    assert!(format!("{err:#}").contains("fused"), "{err:#}");
}

#[test]
fn a_wrong_or_nan_output_shows_in_rel_err() {
    let mut b = Scripted::new();
    b.skew = 0.5;
    let file = attention::run(&config(&["fused"], &[200]), &mut b, hardware()).unwrap();
    assert!(file.samples[0].rel_err.unwrap() > 0.1);
    b.skew = f32::NAN;
    let file = attention::run(&config(&["fused"], &[200]), &mut b, hardware()).unwrap();
    assert_eq!(file.samples[0].rel_err, None);
}

#[test]
fn bad_configs_are_refused_before_running() {
    let mut cfg = config(&["fused"], &[10]);
    cfg.kv_heads = 3;
    assert!(attention::run(&cfg, &mut CpuBackend::default(), hardware()).is_err());
    let cfg = config(&[], &[10]);
    assert!(attention::run(&cfg, &mut CpuBackend::default(), hardware()).is_err());
    let mut cfg = config(&["fused"], &[10]);
    cfg.head_dim = 96;
    let err = attention::run(&cfg, &mut CpuBackend::default(), hardware()).unwrap_err();
    assert!(format!("{err:#}").contains("head_dim 96"), "{err:#}");
}

#[test]
fn json_has_exactly_the_schema_fields() {
    let file = attention::run(
        &config(&["fused"], &[10]),
        &mut CpuBackend::default(),
        hardware(),
    )
    .unwrap();
    let v = serde_json::to_value(&file).unwrap();
    let mut top: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    top.sort();
    assert_eq!(top, ["hardware", "samples", "schema"]);
    let mut keys: Vec<&str> = v["samples"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "backend",
            "dtype",
            "gflops",
            "head_dim",
            "history",
            "iterations",
            "kv_heads",
            "length",
            "median_ms",
            "min_ms",
            "q_heads",
            "query_block",
            "rel_err",
            "route",
            "transient_bytes",
        ]
    );
    assert_eq!(v["samples"][0]["route"], "fused");
    assert_eq!(v["hardware"]["backend"], "cpu");
    let back: headroom_bench::schema::AttentionBenchFile = serde_json::from_value(v).unwrap();
    assert_eq!(back, file);
}

#[test]
fn the_yardstick_runs_once_per_round_and_only_measured_rounds_count() {
    let cfg = config(&["fused", "composed:8"], &[10, 20]);
    let mut calls = 0usize;
    let mut tick = || {
        calls += 1;
        calls as f64
    };
    let (file, times) = attention::run_with_yardstick(
        &cfg,
        &mut CpuBackend::default(),
        hardware(),
        Some(&mut tick),
    )
    .unwrap();
    assert_eq!(file.samples.len(), 4);
    // Per length: 1 warm-up round (not returned) + 3 measured rounds.
    assert_eq!(calls, 2 * (1 + 3));
    assert_eq!(times, [2.0, 3.0, 4.0, 6.0, 7.0, 8.0]);
}

#[test]
fn rel_err_is_the_worst_checked_head_not_a_pooled_average() {
    let cfg = config(&["fused"], &[200]);
    let mut b = Scripted::new();
    b.skew = 0.25;
    let all = attention::run(&cfg, &mut b, hardware()).unwrap().samples[0]
        .rel_err
        .unwrap();
    // Only the last head (3) is wrong: the worst head is as wrong as before,
    // where a Frobenius norm pooled over both checked heads would drop ~1/sqrt(2).
    b.skew_head = Some(3);
    let one = attention::run(&cfg, &mut b, hardware()).unwrap().samples[0]
        .rel_err
        .unwrap();
    assert!(
        all > 0.05 && one > 0.85 * all,
        "all heads {all}, one head {one}"
    );
    // A head outside the checked subset (0 and 3) does not show.
    b.skew_head = Some(1);
    let unchecked = attention::run(&cfg, &mut b, hardware()).unwrap().samples[0]
        .rel_err
        .unwrap();
    assert!(
        unchecked < 1e-2,
        "all {all} one {one} unchecked {unchecked}"
    );
}
